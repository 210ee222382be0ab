// Final boards from the revealed game records (docs/rules.md sections 2-3), like the terminal
// client's own replay: the deal's layout (SplitMix64 and an unbiased Fisher-Yates, as in
// shared/deal.py), then each recorded entry applied in order. Used only after the results, when
// the deal is public; the server has already checked every entry, so this only moves cards.

const MASK64 = (1n << 64n) - 1n;
const TWO64 = 1n << 64n;
export const PILE_NAMES = ["stock", "waste", "reserve",
  "f0", "f1", "f2", "f3", "f4", "f5", "f6", "f7",
  "t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8", "t9", "t10", "t11"];
const STOCK = 0, WASTE = 1, RESERVE = 2, F0 = 3, T0 = 11;

function splitMix64(seed) {
  let state = BigInt(seed) & MASK64;
  return () => {
    state = (state + 0x9E3779B97F4A7C15n) & MASK64;
    let z = state;
    z = ((z ^ (z >> 30n)) * 0xBF58476D1CE4E5B9n) & MASK64;
    z = ((z ^ (z >> 27n)) * 0x94D049BB133111EBn) & MASK64;
    return z ^ (z >> 31n);
  };
}

/** The 104 card ids in dealing order, first dealt first. */
export function shuffledCards(deal) {
  const next = splitMix64(deal);
  const cards = Array.from({ length: 104 }, (_, i) => i);
  for (let i = 103; i > 0; i--) {
    const m = BigInt(i + 1);
    const limit = TWO64 - (TWO64 % m);
    let x = next();
    while (x >= limit) x = next();
    const j = Number(x % m);
    [cards[i], cards[j]] = [cards[j], cards[i]];
  }
  return cards;
}

/** Replay a record; returns a view (the protocol's board fields) and how many cards are home. */
export function replayRecord(deal, moves) {
  const cards = shuffledCards(deal);
  const piles = PILE_NAMES.map(() => []);
  piles[STOCK] = cards.slice(26).reverse(); // next card to turn at the end
  piles[RESERVE] = cards.slice(0, 13);
  piles[F0] = [cards[13]];
  for (let t = 0; t < 12; t++) piles[T0 + t] = [cards[14 + t]];
  let undoStack = [];
  for (const entry of moves) {
    if (entry === "resign") continue;
    if (entry === "undo") {
      const last = undoStack.pop();
      if (last) piles[last[0]].push(piles[last[1]].pop());
      continue;
    }
    const [srcName, dstName] = String(entry).split(">");
    const src = PILE_NAMES.indexOf(srcName), dst = PILE_NAMES.indexOf(dstName);
    if (src < 0 || dst < 0 || piles[src].length === 0) throw new Error(`cannot replay entry ${entry}`);
    piles[dst].push(piles[src].pop());
    if (src === STOCK || src === RESERVE) undoStack = []; // neither can be undone (docs/rules.md, "Undo")
    else undoStack.push([src, dst]);
  }
  const foundations = piles.slice(F0, T0);
  return {
    view: {
      stock: piles[STOCK].length,
      waste: piles[WASTE],
      reserve_top: piles[RESERVE].length ? piles[RESERVE][piles[RESERVE].length - 1] : null,
      reserve_count: piles[RESERVE].length,
      foundations,
      tableau: piles.slice(T0),
    },
    cardsHome: foundations.reduce((n, pile) => n + pile.length, 0),
  };
}

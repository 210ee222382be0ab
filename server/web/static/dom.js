// Small helpers of the pages' modules (daily.js): elements with text children only, the clock,
// counts, and SHA-256 through Web Crypto. Every string from the server goes into a page as text.

/** An element with text children only: strings become text nodes, never markup. */
export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "className") node.className = value;
    else if (key === "text") node.textContent = String(value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export const num = (x) => (typeof x === "bigint" ? Number(x) : x); // uint64 times arrive as BigInt over the socket

export function clock(ms) {
  if (ms === null || ms === undefined) return "-:--";
  let seconds = Math.floor(Math.max(num(ms), 0) / 1000);
  let minutes = Math.floor(seconds / 60);
  seconds %= 60;
  const ss = String(seconds).padStart(2, "0");
  if (minutes >= 60) {
    const hours = Math.floor(minutes / 60);
    minutes %= 60;
    return `${hours}:${String(minutes).padStart(2, "0")}:${ss}`;
  }
  return `${minutes}:${ss}`;
}

export function ordinal(n) {
  const suffix = n % 100 >= 10 && n % 100 <= 20 ? "th" : ({ 1: "st", 2: "nd", 3: "rd" }[n % 10] ?? "th");
  return `${n}${suffix}`;
}

export function plural(n, word) {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}

export async function sha256Hex(text) {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text));
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

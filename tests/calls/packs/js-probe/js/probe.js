// A test pack's code: what a js action may do (answer, fetch) and what it may not (spin, hog, shout).
export async function answer(input) {
  return { got: input.n * 2 };
}

export async function fetchPath(input) {
  const response = await fetch(input.url);
  return { status: response.status, body: await response.text() };
}

export async function spin() {
  for (;;) {}
}

export async function hog() {
  const kept = [];
  for (;;) kept.push(Buffer.alloc(32 << 20, 1));
}

export async function shout() {
  for (let i = 0; i < 40; i++) console.log("y".repeat(1 << 16));
  return {};
}

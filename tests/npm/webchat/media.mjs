// Drives the web chat through a run whose tools answered with images: the
// reference "everything" server's tiny image and a hostile server's mix
// (tests/npm/mcp-servers/media.mjs). Only the real raster images become
// <img>; the SVG, the attribute break-out and the HTML are named, never
// loaded. Desktop light, dark, and the session replayed on a 390 px phone.
// Prints one JSON summary on stdout; screenshots go to
// <artifacts-dir>/webchat-media-*.png.
//
// usage: node media.mjs <chat-url> <artifacts-dir>
import { launchChromium, watchPage } from "./browser.mjs";

const [startUrl, artifacts] = process.argv.slice(2);
const browser = await launchChromium();
const summary = { errors: [], dialogs: [], requests: [] };
let current = null;

function watch(page) {
  current = page;
  watchPage(page, summary);
  page.on("request", (r) => { if (!r.url().startsWith("data:")) summary.requests.push(new URL(r.url()).origin); });
}

const shot = (name, p, fullPage = true) => p.screenshot({ path: `${artifacts}/webchat-media-${name}.png`, fullPage });
const last = "#messages > li.assistant:last-child";

const media = (page) => page.$eval(`${last} .media`, (m) => ({
  images: [...m.querySelectorAll("img")].map((i) => ({
    type: i.src.slice(0, i.src.indexOf(";")),
    width: i.naturalWidth,
    alt: i.alt,
    attributes: i.getAttributeNames(),
  })),
  notes: [...m.querySelectorAll("p")].map((p) => p.textContent),
  captions: [...m.querySelectorAll("figcaption")].map((c) => c.textContent),
  width: m.getBoundingClientRect().width,
}));

try {
  const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
  const page = await context.newPage();
  watch(page);
  await page.goto(startUrl);
  await page.waitForFunction(() => document.querySelector("#workspace").value !== "");
  await page.fill("#message", "use mcp:every/get-tiny-image then mcp:media/pictures");
  await page.press("#message", "Enter");
  await page.waitForSelector(`${last} .run-status:has-text("completed")`);
  await page.waitForFunction((sel) => [...document.querySelectorAll(sel)].every((i) => i.complete), `${last} .media img`);
  summary.desktop = await media(page);
  summary.pwned = await page.evaluate(() => window.__pwned === true);
  await shot("desktop", page);
  await page.emulateMedia({ colorScheme: "dark" });
  await shot("dark", page);
  await context.close();

  // The session replayed on a phone shows the same images inside the screen.
  const phone = await browser.newContext({ viewport: { width: 390, height: 844 }, colorScheme: "dark", isMobile: true, hasTouch: true });
  const mobile = await phone.newPage();
  watch(mobile);
  await mobile.goto(startUrl);
  await mobile.click("#drawer-open");
  await mobile.waitForSelector("#sidebar li.session", { state: "visible" });
  await mobile.click("#sidebar li.session .session-open");
  await mobile.waitForSelector(`${last} .media img`);
  await mobile.waitForFunction(() => !document.body.classList.contains("drawer-open"));
  await mobile.$eval(`${last} .media`, (m) => m.scrollIntoView());
  summary.phone = await media(mobile);
  summary.phone.overflow = await mobile.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  await shot("390-dark", mobile, false);
  await phone.close();
} catch (e) {
  if (current) await current.screenshot({ path: `${artifacts}/webchat-media-failure.png`, fullPage: true }).catch(() => {});
  process.stderr.write(`summary so far: ${JSON.stringify(summary)}\n`);
  throw e;
} finally {
  await browser.close();
}
process.stdout.write(JSON.stringify(summary) + "\n");

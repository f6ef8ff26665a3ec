// Drives the web chat's change cards in headless Chromium: a command edits
// two files and deletes a third; the card lists them with their diffs; Undo
// restores them. A second run edits them again, then a person edits one of
// the files: Undo is refused naming that file, "Undo the others" restores the
// rest. Desktop light, desktop dark and a 390 px phone. Prints one JSON
// summary on stdout; screenshots go to <artifacts-dir>/webchat-changes-*.png.
//
// usage: node undo.mjs <chat-url> <workspace> <artifacts-dir>
import { writeFileSync } from "node:fs";
import { launchChromium, watchPage } from "./browser.mjs";

const [startUrl, workspace, artifacts] = process.argv.slice(2);
const browser = await launchChromium();
const summary = { errors: [], dialogs: [] };
let current = null;

function watch(page) {
  current = page;
  watchPage(page, summary);
}

const shot = (name, p, fullPage = true) => p.screenshot({ path: `${artifacts}/webchat-changes-${name}.png`, fullPage });
const card = "#messages > li.assistant:last-child .changes";

// Sends a command and answers its approval (if the profile asks), then
// waits for the change card to say the changes were applied.
async function runCommand(page, command) {
  await page.fill("#message", `run \`${command}\``);
  await page.press("#message", "Enter");
  const approve = "#messages > li.assistant:last-child .approval:not(.changes) button:has-text(\"Approve\")";
  await page.waitForSelector(`${approve}, ${card}`);
  if (await page.$(approve)) await page.click(approve);
  await page.waitForSelector(`${card} .approval-title:has-text("Changes applied")`);
  await page.waitForSelector("#messages > li.assistant:last-child .run-status:has-text(\"completed\")");
}

async function cardState(page) {
  return page.$eval(card, (c) => ({
    title: c.querySelector(".approval-title").textContent,
    files: [...c.querySelectorAll(".change-files > li")].map((l) => (l.querySelector("summary") || l).textContent),
    diffs: [...c.querySelectorAll(".change-files pre.diff")].map((p) => p.textContent),
    buttons: [...c.querySelectorAll("button")].map((b) => b.textContent),
    status: c.querySelector(".decision").textContent,
    changeSet: c.dataset.changeSet,
  }));
}

const overflow = (page) => page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);

try {
  const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
  const page = await context.newPage();
  watch(page);
  await page.goto(startUrl);
  await page.waitForFunction(() => document.querySelector("#workspace").value !== "");

  // 1. Edit two files, delete a third; the card lists them; Undo restores them.
  await runCommand(page, "sed -i \"s/the /THE /g\" ops/key-rotation.md guides/releases.md && rm ops/oncall.rst");
  await page.click(`${card} .change-files details summary`);
  summary.first = await cardState(page);
  await shot("applied", page);
  await page.click(`${card} button:has-text("Undo")`);
  await page.waitForFunction((sel) => document.querySelector(sel)?.textContent.startsWith("undone"), `${card} .decision`);
  summary.firstUndo = await cardState(page);

  // 2. The same edit again, then the person edits one of the files by hand.
  await runCommand(page, "sed -i \"s/the /THE /g\" ops/key-rotation.md guides/releases.md");
  summary.second = await cardState(page);
  writeFileSync(`${workspace}/guides/releases.md`, "the person's own words\n");
  await page.click(`${card} button:has-text("Undo")`);
  await page.waitForSelector(`${card} button:has-text("Undo the others")`);
  summary.refused = await cardState(page);
  await shot("refused", page);
  await page.emulateMedia({ colorScheme: "dark" });
  await shot("refused-dark", page);
  await page.click(`${card} button:has-text("Undo the others")`);
  await page.waitForFunction((sel) => document.querySelector(sel)?.textContent.startsWith("undone"), `${card} .decision`);
  summary.others = await cardState(page);
  await context.close();

  // 3. A phone, dark: the session replayed shows the cards without overflow.
  const phone = await browser.newContext({ viewport: { width: 390, height: 844 }, colorScheme: "dark", isMobile: true, hasTouch: true });
  const mobile = await phone.newPage();
  watch(mobile);
  await mobile.goto(startUrl);
  await mobile.click("#drawer-open");
  await mobile.waitForSelector("#sidebar li.session", { state: "visible" });
  await mobile.click("#sidebar li.session .session-open");
  await mobile.waitForSelector("#messages .changes");
  await mobile.waitForFunction(() => [...document.querySelectorAll("#messages .changes")].every((c) => c.dataset.state !== "applied")).catch(() => {});
  await mobile.waitForFunction(() => !document.body.classList.contains("drawer-open"));
  await mobile.$eval("#messages .changes", (c) => c.scrollIntoView());
  summary.phone = {
    cards: await mobile.$$eval("#messages .changes", (cs) => cs.length),
    undoButtons: await mobile.$$eval("#messages .changes button", (bs) => bs.length),
    undoneTitles: await mobile.$$eval("#messages .changes .approval-title", (ts) => ts.filter((t) => t.textContent.startsWith("Changes undone")).length),
    overflow: await overflow(mobile),
  };
  await shot("390-dark", mobile, false);
  await phone.close();
} catch (e) {
  if (current) await current.screenshot({ path: `${artifacts}/webchat-changes-failure.png`, fullPage: true }).catch(() => {});
  process.stderr.write(`summary so far: ${JSON.stringify(summary)}\n`);
  throw e;
} finally {
  await browser.close();
}
process.stdout.write(JSON.stringify(summary) + "\n");

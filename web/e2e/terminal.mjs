// Drives the web page in headless Chromium (Debian's, through playwright-core): sign in,
// see the sandbox list with its usage, open a terminal, type a command, see its output, reload, and see the
// output replayed. Exits non-zero with a message on any failure.
//   WARREN_URL=http://127.0.0.1:7070 WARREN_API_KEY=... SANDBOX=id node web/e2e/terminal.mjs
import { chromium } from "playwright-core";

const url = process.env.WARREN_URL;
const key = process.env.WARREN_API_KEY;
const sandbox = process.env.SANDBOX;
const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";
if (!url || !key || !sandbox) {
  console.error("set WARREN_URL, WARREN_API_KEY and SANDBOX");
  process.exit(2);
}

const browser = await chromium.launch({ executablePath, args: ["--no-sandbox"] });
const timeout = 30_000;
try {
  const page = await browser.newPage();
  page.setDefaultTimeout(timeout);
  await page.goto(url + "/");

  // A wrong key is refused; the right one signs in and lists the sandbox.
  await page.fill("#api-key", "wrong-key");
  await page.click("#sign-in-form button");
  await page.waitForSelector("#sign-in-error:has-text('not valid')");
  await page.fill("#api-key", key);
  await page.click("#sign-in-form button");
  await page.waitForSelector(`#sandbox-rows tr[data-sandbox="${sandbox}"] td.id`);

  // Its row shows what it used: the CPU second the test burned before (MIN_CPU_S).
  const cpu = Number(
    await page.textContent(`#sandbox-rows tr[data-sandbox="${sandbox}"] td.cpu`),
  );
  const minCpu = Number(process.env.MIN_CPU_S || "0");
  if (!(cpu >= minCpu)) throw new Error(`CPU shown for ${sandbox}: ${cpu}, want >= ${minCpu}`);
  const running = Number(
    await page.textContent(`#sandbox-rows tr[data-sandbox="${sandbox}"] td.running`),
  );
  if (!(running > 0)) throw new Error(`running seconds shown: ${running}`);

  // Open its terminal, type, see the output (the sum proves the shell ran it).
  await page.fill("#open-id", sandbox);
  await page.click("#open-form button");
  await page.waitForSelector("#terminal-status:has-text('connected')");
  await page.click("#terminal");
  await page.keyboard.type("echo browser-$((40+2))\n");
  const rows = page.locator("#terminal .xterm-rows");
  await rows.filter({ hasText: "browser-42" }).waitFor();

  // Reload: the page comes back to the terminal and the output is replayed.
  await page.reload();
  await page.waitForSelector("#terminal-status:has-text('connected')");
  await rows.filter({ hasText: "browser-42" }).waitFor();

  // The same shell, not a new one: a variable set before the reload is still there.
  await page.click("#terminal");
  await page.keyboard.type("X=kept; echo again-$((1+1))-$X\n");
  await rows.filter({ hasText: "again-2-kept" }).waitFor();
  console.log("browser terminal test passed");
} catch (e) {
  console.error("browser terminal test failed:", e.message);
  process.exitCode = 1;
} finally {
  await browser.close();
}

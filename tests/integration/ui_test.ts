/**
 * End to end: the live flow view (`/ui`) in headless Chromium (Debian's `chromium`, driven by
 * `puppeteer-core` over the DevTools protocol): the page loads with no console error, shows
 * the flows flowgen sends within seconds, its filter works, and a screenshot is saved as a test
 * artefact (`test-artifacts/ui.png`).
 */

import assert from "node:assert/strict";
import puppeteer from "puppeteer-core";
import { FaProcess, flowLogConfig, REPO, runDeno } from "../_helpers/process.ts";
import { FLOWGEN_TS } from "../../scripts/bench/process.ts";

const CHROMIUM = "/usr/bin/chromium";

Deno.test({
  name: "ui: the live view shows flowgen's flows in headless Chromium, filters them, no errors",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const dir = await Deno.makeTempDir({ prefix: "fa-ui-" });
    const fa = await FaProcess.startWithConfig(dir, flowLogConfig(`${dir}/flows.log`));
    const browser = await puppeteer.launch({
      executablePath: CHROMIUM,
      headless: true,
      args: ["--no-sandbox", "--ignore-certificate-errors", "--disable-gpu"],
    });
    try {
      const port = await fa.collectorPort();
      const apiPort = await fa.apiPort();
      const token = await Deno.readTextFile(fa.apiTokenFile!);
      const page = await browser.newPage();
      const errors: string[] = [];
      page.on("console", (m) => {
        if (m.type() === "error") errors.push(m.text());
      });
      page.on("pageerror", (e) => errors.push(String(e)));
      await page.goto(`https://127.0.0.1:${apiPort}/ui#token=${encodeURIComponent(token)}`);
      await page.waitForFunction(`document.getElementById("status").textContent === "live"`, {
        timeout: 15_000,
      });
      const sent = runDeno([
        "run",
        "-A",
        FLOWGEN_TS,
        "--target",
        `127.0.0.1:${port}`,
        "--proto",
        "tcp",
        "--agents",
        "2",
        "--flows",
        "40",
        "--rate",
        "400",
        "--duration",
        "4",
      ], { cwd: REPO });
      // The 1 s active timeout exports the flows; the page gets them within a second more.
      await page.waitForFunction(`document.querySelectorAll("#rows tbody tr").length >= 10`, {
        timeout: 20_000,
      });
      assert.equal((await sent).code, 0);
      const text = (js: string) => page.evaluate(js) as Promise<string>;
      const firstPod = await text(
        `document.querySelector("#rows tbody tr td:nth-child(5)").innerText`,
      );
      assert.match(firstPod, /\//, "Pod shown as namespace/name");
      const ledger = await text(`document.getElementById("ledger").innerText`);
      assert.match(ledger, /received: [1-9]/);
      const topRows = await page.evaluate(
        `document.querySelectorAll("#top table tbody tr").length`,
      );
      assert.ok((topRows as number) > 0, "top talkers shown");

      // The artefact shows the page with its data, before any filter.
      await Deno.mkdir(`${REPO}test-artifacts`, { recursive: true });
      await page.screenshot({ path: `${REPO}test-artifacts/ui.png`, fullPage: true });
      assert.ok((await Deno.stat(`${REPO}test-artifacts/ui.png`)).size > 10_000);

      // The filter keeps only matching rows, and nothing for a value no flow has.
      const pod = firstPod.split("/")[1];
      await page.type("#filter", pod);
      const kept = await page.evaluate(
        `[...document.querySelectorAll("#rows tbody tr")].map((r) => r.innerText)`,
      ) as string[];
      assert.ok(kept.length > 0 && kept.every((t) => t.includes(pod)), `${kept.length} rows`);
      await page.evaluate(`document.getElementById("filter").value = ""`);
      await page.type("#filter", "no-such-pod-anywhere");
      assert.equal(await page.evaluate(`document.querySelectorAll("#rows tbody tr").length`), 0);

      assert.deepEqual(errors, []);

      // A page without the token is refused its data, and says so.
      const anon = await browser.newPage();
      await anon.goto(`https://127.0.0.1:${apiPort}/ui`);
      await anon.waitForFunction(
        `document.getElementById("status").textContent === "enter the API token"`,
      );
      assert.equal((await fa.stop("SIGTERM")).code, 0, fa.stderr);
    } finally {
      await browser.close();
      fa.kill("SIGKILL");
      await fa.status;
      await Deno.remove(dir, { recursive: true });
    }
  },
});

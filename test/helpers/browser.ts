/** Headless Chromium for report tests: the system browser (Debian package `chromium`), driven by puppeteer-core. */
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';

/** Path of a Chromium / Chrome executable (CHROMIUM_PATH, then the usual names on PATH), or undefined. */
export function findChromium(): string | undefined {
  const env = process.env.CHROMIUM_PATH;
  if (env) return existsSync(env) ? env : undefined;
  for (const name of ['chromium', 'chromium-browser', 'google-chrome-stable', 'google-chrome']) {
    try {
      const p = execFileSync('sh', ['-c', `command -v ${name}`], { encoding: 'utf8' }).trim();
      if (p) return p;
    } catch {
      /* not on PATH */
    }
  }
  return undefined;
}

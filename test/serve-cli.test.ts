/**
 * `papergym-native serve` as a process: started through a wrapper process (as
 * `npx` starts it), the server exits and frees its port when the wrapper is killed with SIGKILL
 * (it cannot forward a signal then); it also answers a chat completion with logprobs while up.
 */
import { expect } from 'chai';
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from '../lib/native.js';
import { tinyModel } from './helpers/tiny.js';

const CLI = join(packageRoot, 'dist', 'bin', 'papergym-native.js');

/** True while `pid` runs (a zombie waiting for its reaper counts as exited). */
function alive(pid: number): boolean {
  const f = `/proc/${pid}/status`;
  if (existsSync('/proc/self/status')) {
    if (!existsSync(f)) return false;
    return !/^State:\s+Z/m.test(readFileSync(f, 'utf8'));
  }
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe('serve CLI: exits when the process that started it goes away', function () {
  this.timeout(180000);
  it('wrapper killed (SIGKILL) → serve exits and frees its port', async () => {
    const model = tinyModel('tiny-tied');
    // The wrapper starts serve as its child and stays, like npx does.
    const wrapper = spawn(
      process.execPath,
      ['-e', `const c = require('child_process').spawn(process.execPath, ${JSON.stringify([CLI, 'serve', '--model', model, '--port', '0', '--max-tokens', '4'])}, { stdio: ['ignore', 'pipe', 'inherit'] }); c.stdout.on('data', (d) => process.stdout.write('child ' + c.pid + ' ' + d)); setInterval(() => {}, 1000);`],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    let out = '';
    const m = await new Promise<RegExpMatchArray>((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`serve did not start: ${out}`)), 150000);
      wrapper.stdout!.on('data', (d) => {
        out += d;
        const mm = /child (\d+) serving \S+ at (http:\/\/\S+\/v1)/.exec(out);
        if (mm) {
          clearTimeout(t);
          resolve(mm);
        }
      });
    });
    const pid = Number(m[1]);
    const url = m[2]!;
    try {
      const r = await fetch(`${url}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], temperature: 0, logprobs: true, top_logprobs: 2 }) });
      expect(r.status).to.equal(200);
      expect((await r.json()).choices[0].logprobs.content[0].top_logprobs).to.have.length(2);
      expect(alive(pid)).to.equal(true);
      wrapper.kill('SIGKILL');
      for (let i = 0; i < 100 && alive(pid); i++) await new Promise((res) => setTimeout(res, 100));
      expect(alive(pid), 'serve still running 10 s after its parent was killed').to.equal(false);
      let refused = false;
      await fetch(`${url}/models`).catch(() => (refused = true));
      expect(refused).to.equal(true);
    } finally {
      if (alive(pid)) process.kill(pid, 'SIGKILL');
      wrapper.kill('SIGKILL');
    }
  });
});

/**
 * `papergym-native serve` as a process: started through a wrapper process as `npx` starts it
 * (npm_command=exec in its environment), the server exits and frees its port when the wrapper is
 * killed with SIGKILL (it cannot forward a signal then); it also answers a chat completion with
 * logprobs while up. Started with `nohup … &` from a shell script that then exits (no npm in its
 * environment), it stays up; SIGTERM stops it cleanly.
 */
import { expect } from 'chai';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { packageRoot } from '../lib/native.js';
import { tinyModel } from './helpers/tiny.js';
import { exitsWithParent } from '../bin/commands/serve.js';

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

/** The environment without npm's variables (a plain shell, systemd). */
function withoutNpm(): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^npm_/i.test(k)));
}

describe('serve CLI: exits with its parent only when npm started it (or --exit-with-parent)', function () {
  this.timeout(180000);
  it('wrapper killed (SIGKILL) → serve exits and frees its port', async () => {
    const model = tinyModel('tiny-tied');
    // The wrapper starts serve as its child and stays, like npx does.
    const wrapper = spawn(
      process.execPath,
      [
        '-e',
        `const c = require('child_process').spawn(process.execPath, ${JSON.stringify([CLI, 'serve', '--model', model, '--port', '0', '--max-tokens', '4'])}, { stdio: ['ignore', 'pipe', 'inherit'] }); c.stdout.on('data', (d) => process.stdout.write('child ' + c.pid + ' ' + d)); setInterval(() => {}, 1000);`,
      ],
      { stdio: ['ignore', 'pipe', 'inherit'], env: { ...withoutNpm(), npm_command: 'exec', npm_lifecycle_event: 'npx' } },
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
      const r = await fetch(`${url}/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], temperature: 0, logprobs: true, top_logprobs: 2 }),
      });
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

  it('nohup … & from a script whose shell exits: serve stays up; SIGTERM stops it cleanly', async () => {
    const model = tinyModel('tiny-tied');
    const dir = mkdtempSync(join(tmpdir(), 'pg-serve-nohup-'));
    const log = join(dir, 'serve.log');
    const script = join(dir, 'start-judge.sh');
    const args = [CLI, 'serve', '--model', model, '--port', '0', '--max-tokens', '4'].map((a) => `'${a}'`).join(' ');
    writeFileSync(script, `#!/bin/sh\nnohup '${process.execPath}' ${args} > '${log}' 2>&1 &\necho $!\n`);
    const started = spawnSync('sh', [script], { encoding: 'utf8', env: withoutNpm() });
    expect(started.status).to.equal(0); // the script and its shell have exited
    const pid = Number(started.stdout.trim());
    try {
      let url = '';
      for (let i = 0; i < 1500 && !url; i++) {
        await new Promise((res) => setTimeout(res, 100));
        url = /serving \S+ at (http:\/\/\S+\/v1)/.exec(existsSync(log) ? readFileSync(log, 'utf8') : '')?.[1] ?? '';
        if (!alive(pid)) break;
      }
      expect(url, readFileSync(log, 'utf8')).to.not.equal('');
      expect(readFileSync(log, 'utf8')).to.match(/runs until SIGINT \/ SIGTERM/);
      // Its parent shell is gone; a second of the old orphan check has passed several times over.
      await new Promise((res) => setTimeout(res, 2500));
      expect(alive(pid), readFileSync(log, 'utf8')).to.equal(true);
      process.kill(pid, 'SIGHUP'); // nohup's intent: a hangup does not stop it
      await new Promise((res) => setTimeout(res, 500));
      expect(alive(pid)).to.equal(true);
      const r = await fetch(`${url}/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], temperature: 0, max_tokens: 2 }),
      });
      expect(r.status).to.equal(200);
      process.kill(pid, 'SIGTERM');
      for (let i = 0; i < 100 && alive(pid); i++) await new Promise((res) => setTimeout(res, 100));
      expect(alive(pid), 'serve still running 10 s after SIGTERM').to.equal(false);
      expect(readFileSync(log, 'utf8'))
        .to.match(/serve: SIGTERM: shutting down/)
        .and.match(/SIGHUP ignored/);
      let refused = false;
      await fetch(`${url}/models`).catch(() => (refused = true));
      expect(refused).to.equal(true);
    } finally {
      if (alive(pid)) process.kill(pid, 'SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('exitsWithParent: the flag wins; unset = on under npx / npm exec / an npm script only', () => {
    expect(exitsWithParent(undefined, {})).to.equal(false);
    expect(exitsWithParent(undefined, { npm_command: 'exec' })).to.equal(true);
    expect(exitsWithParent(undefined, { npm_lifecycle_event: 'start' })).to.equal(true);
    expect(exitsWithParent(false, { npm_command: 'exec' })).to.equal(false);
    expect(exitsWithParent(true, {})).to.equal(true);
  });
});

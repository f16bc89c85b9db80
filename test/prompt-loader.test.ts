/**
 * One loader and renderer for prompts/ (lib/util/prompts.ts): the judge's loadPrompt and the data
 * pipeline's loadDataPrompt read through it, with their cache-key hashes as before (16 and 8 hex
 * digits of the same sha256), and the one renderer substitutes in one pass.
 */
import { expect } from 'chai';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadPromptFile, promptsDir, renderTemplate } from '../lib/util/prompts.js';
import { loadPrompt, renderTemplate as judgeRender, PER_ITEM_PROMPT } from '../lib/judge/verdict.js';
import { loadDataPrompt, renderPrompt } from '../lib/data/prompts.js';

describe('prompts/: one loader and renderer', () => {
  it('the judge and the data pipeline read the same file text through it; their hashes are prefixes of its sha256', () => {
    const raw = readFileSync(join(promptsDir(), `${PER_ITEM_PROMPT}.md`), 'utf8');
    const f = loadPromptFile(PER_ITEM_PROMPT);
    expect(f.template).to.equal(raw.replace(/^\s*<!--[\s\S]*?-->/, '').trim());
    expect(f.sha256).to.equal(createHash('sha256').update(f.template).digest('hex'));
    const j = loadPrompt(PER_ITEM_PROMPT);
    expect(j.template).to.equal(f.template);
    expect(j.hash).to.equal(f.sha256.slice(0, 16));
    const d = loadDataPrompt('map');
    const df = loadPromptFile('data-map.v1');
    expect(d.template).to.equal(df.template);
    expect(d.version).to.equal(`data-map.v1#${df.sha256.slice(0, 8)}`);
  });

  it('a prompt in another dir; the header comment is not sent; a missing file names it', () => {
    const dir = mkdtempSync(join(tmpdir(), 'pg-prompts-'));
    try {
      writeFileSync(join(dir, 'x.v1.md'), '<!-- doc: not sent -->\n\nGrade {{plan}} against {{item}}.\n');
      expect(loadPromptFile('x.v1', dir).template).to.equal('Grade {{plan}} against {{item}}.');
      expect(() => loadPromptFile('missing.v1', dir)).to.throw(/missing\.v1\.md/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('one renderer: one pass (a value holding a placeholder stays literal), numbers as text, a missing value named', () => {
    expect(renderTemplate('{{plan}} / {{n}}', { plan: 'uses {{item}}', n: 3 })).to.equal('uses {{item}} / 3');
    expect(judgeRender).to.equal(renderTemplate);
    expect(renderPrompt('{{a}}', { a: 1 })).to.equal('1');
    expect(() => renderTemplate('{{item}}', {})).to.throw(/\{\{item\}\} has no value/);
  });
});

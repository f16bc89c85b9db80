/**
 * Models, adapters and datasets by their Hugging Face Hub id: the huggingface_hub cache layout
 * (cache.ts), downloads through `@huggingface/hub` (download.ts) and the one resolver every command
 * uses (resolve.ts). docs/hub.md says what is fetched, where it is cached and how to work offline.
 */
export * from './cache.js';
export * from './download.js';
export * from './resolve.js';
export * from './upload.js';
export * from './cards.js';
export * from './publish.js';

/** Settings of `doctor` (lib/config/settings.ts re-exports them; schema: lib/config/schema.ts). */
import type { Setting } from '../schema.js';

export const DOCTOR_OPTIONS: readonly Setting[] = [
  {
    key: 'json',
    flag: 'json',
    type: 'boolean',
    default: false,
    meaning: 'Print the environment report as JSON',
    source: 'vLLM collect_env / torch.utils.collect_env',
  },
];

/** Device strings of the CLI: `auto`, `cpu`, `cuda`, `cuda:N`, checked against what the addon sees. */
import { native } from '../native.js';

/**
 * Resolves a device string: `auto` → `cuda` when the addon sees a GPU, else `cpu`; `cuda` /
 * `cuda:N` are checked to exist. Throws an Error naming the device (and the flag) otherwise.
 */
export function resolveDevice(spec: string, flag = '--device'): 'cpu' | 'cuda' | `cuda:${number}` {
  const m = /^(auto|cpu|cuda)(?::(\d+))?$/.exec(spec);
  if (!m || (m[1] !== 'cuda' && m[2] !== undefined)) throw new Error(`${flag} ${spec}: expected auto, cpu, cuda or cuda:N`);
  if (m[1] === 'cpu') return 'cpu';
  let devices = 0;
  let available = false;
  try {
    const info = native().runtimeInfo();
    available = info.cudaAvailable;
    devices = info.cudaDevices.length;
  } catch {
    available = false;
  }
  if (m[1] === 'auto') return available ? 'cuda' : 'cpu';
  if (!available) throw new Error(`${flag} ${spec}: CUDA is not available to the addon (see papergym-native doctor)`);
  const idx = m[2] === undefined ? 0 : Number(m[2]);
  if (idx >= devices) throw new Error(`${flag} ${spec}: only ${devices} CUDA device(s) visible (cuda:0${devices > 1 ? `..cuda:${devices - 1}` : ''})`);
  return spec as 'cuda' | `cuda:${number}`;
}

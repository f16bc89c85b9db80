import { expect } from 'chai';
import { completionMask, completionMaskTensor, QWEN3_STOP_IDS } from '../lib/train/masks.js';

describe('completion masks', () => {
  it('a completion mask ends at the first of any stop id (151645 or 151643) and masks padding by position, never by pad id', () => {
    const PAD = 151643; // Qwen3 pads with <|endoftext|>, itself a stop id
    const rows = [
      [5, 6, 151645, 7, 8, PAD], // stop at 2 (im_end); later tokens out
      [5, 151643, 9, 151645, PAD, PAD], // stop at 1 (endoftext)
      [5, 6, 7, 8, 9, 10], // no stop, full length
      [5, 6, 7, PAD, PAD, PAD], // no stop, length 3: padding masked by position even though PAD is a stop id
      [PAD, 4, 4, 4, 4, 4], // genuine endoftext as the first token: kept (it is the stop)
      [3, 3, 0, 0, 0, 0], // pad id 0 that is a real token inside the length stays
    ];
    const lengths = [6, 6, 6, 3, 6, 4];
    const m = completionMask(rows, lengths).map((r) => Array.from(r));
    expect(m).to.deep.equal([
      [1, 1, 1, 0, 0, 0],
      [1, 1, 0, 0, 0, 0],
      [1, 1, 1, 1, 1, 1],
      [1, 1, 1, 0, 0, 0],
      [1, 0, 0, 0, 0, 0],
      [1, 1, 1, 1, 0, 0],
    ]);
    expect(QWEN3_STOP_IDS).to.deep.equal([151645, 151643]);
    const t = completionMaskTensor([[1, 151645, 2], [4]], [3, 1]);
    expect(t.shape).to.deep.equal([2, 3]);
    expect(Array.from(t.data)).to.deep.equal([1, 1, 0, 1, 0, 0]);
  });
  it('rejects bad lengths', () => {
    expect(() => completionMask([[1, 2]], [-1])).to.throw(TypeError);
    expect(() => completionMask([[1, 2]], [1, 2])).to.throw(TypeError);
  });
});

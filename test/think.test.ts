/** The one reader of thinking (lib/llm/think.ts), used by the client, judges, rewards/eval, data pipeline and serve. */
import { expect } from 'chai';
import { splitThink, stripThink, answerStart } from '../lib/llm/think.js';

describe('think reader (one for client, judges, rewards, data pipeline and serve)', () => {
  const table: [string, string, string | undefined][] = [
    ['<think>a</think>b', 'b', 'a'],
    ['<think>\n\n</think>\n\nYes', 'Yes', undefined],
    ['<THINK>Upper</THINK>\nNo', 'No', 'Upper'],
    ['<Think>mixed</tHiNk> ok', 'ok', 'mixed'],
    ['<thinking>claude-style</thinking>\nYes', 'Yes', 'claude-style'],
    ['r1 reasoning without the opening tag\n</think>\n\nFinal answer: No', 'Final answer: No', 'r1 reasoning without the opening tag'],
    ['ok <think>cut off while thinking', 'ok', 'cut off while thinking'],
    ['<think>only thinking, cut off', '', 'only thinking, cut off'],
    ['<think>a</think>x<think>b</think>y', 'xy', 'a\n\nb'],
    ['<think>a</think>\n\nanswer<|im_end|>', 'answer', 'a'],
    ['plain answer<|endoftext|>', 'plain answer', undefined],
    ['no thinking here', 'no thinking here', undefined],
    ['', '', undefined],
  ];
  for (const [text, content, reasoning] of table) {
    it(`${JSON.stringify(text)} → ${JSON.stringify(content)}`, () => {
      const r = splitThink(text);
      expect(r.content).to.equal(content);
      expect(r.reasoning).to.equal(reasoning);
      expect(stripThink(text)).to.equal(content);
    });
  }
  it('answerStart: after the last closing tag; -1 inside an unclosed block', () => {
    expect(answerStart('Yes')).to.equal(0);
    expect(answerStart('<think>x</think>\n\nYes')).to.equal('<think>x</think>'.length);
    expect(answerStart('<think>still going')).to.equal(-1);
    expect(answerStart('<think>a</think>\n<think>again')).to.equal(-1);
    expect(answerStart('Yes <think>late')).to.equal(0);
  });
});

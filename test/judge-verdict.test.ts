import { expect } from 'chai';
import { parseBinaryVerdict, parsePlanVerdicts, perItemMessage, perPlanMessage, renderTemplate, loadPrompt, PER_ITEM_PROMPT } from '../lib/judge/verdict.js';
import { stripThink } from '../lib/llm/think.js';

describe('judge verdict parsing', () => {
  const table: [string, boolean | null, boolean?][] = [
    ['Yes', true],
    ['yes', true],
    ['YES', true],
    ['Yes.', true],
    ['**Yes**', true],
    ['**No**', false],
    ['No.', false],
    ['no', false],
    [' No ', false],
    ['"Yes"', true],
    ['`no`', false],
    ['Yes, the plan specifies ablations.', true],
    ['No, because the plan never mentions baselines.', false],
    ['No - it lacks detail', false],
    ['<think>The plan mentions ablations, so yes... but no wait.</think>\n\nNo', false],
    ['<think>\nhmm\n</think>Yes', true],
    ['</think>\n\nYes', true],
    ['<think>I think the answer is yes', null],
    ['Answer: Yes', true],
    ['Final answer: no', false],
    ['**Verdict:** No', false],
    ['The answer is yes.', true],
    ['The plan covers several points.\nYes', true],
    ['The item is not met.', false],
    ['Not met', false],
    ['Met', true],
    ['True', true],
    ['false', false],
    ['', null],
    ['   ', null],
    ['Maybe', null],
    ['It depends on the details of the plan.', null],
    ['Nothing in the plan addresses it', null],
    ['Yesterday the plan was fine', null],
    ["I'm sorry, but I can't help with that.", null, true],
    ['I cannot evaluate this plan.', null, true],
    ['As an AI, I am unable to determine this.', null, true],
    // Key names are never answers; labels and boxes beat a leading word; conflicts are null
    ['{"met": false}', false],
    ['{"met": null}', null],
    ['{"met": tr', null],
    ['{"satisfied": ', null],
    ['{"verdict": "Partially"}', null],
    ['{"reason": "fine"} Yes', true],
    ['Yes, the plan mentions Adam, but not the budget.\nVerdict: No', false],
    ['No tuned baseline is named.\nFinal answer: Yes', true],
    ['No tuned baseline is named in the plan.', null],
    ['Answer: no baseline is named, so the item is not met.', false],
    ['The answer is not clear from the plan.', null],
    ['Final answer: $\\boxed{\\text{No}}$', false],
    ['\\boxed{Yes}', true],
    ['**Final answer:**\n\nYes', true],
    ['Answer:\nNo', false],
    ['Verdict: **NOT MET**', false],
    ['Verdict: Partially met', null],
    ['No.\n\nThe plan satisfies the rubric item.', null],
    ['No. Yes.', null],
    ['Yes and no.', null],
    ['This plan fails to satisfy the item.', false],
    ['The rubric item is met.', true],
  ];
  for (const [raw, met, refused] of table) {
    it(`${JSON.stringify(raw)} → ${met}${refused ? ' (refused)' : ''}`, () => {
      const r = parseBinaryVerdict(raw);
      expect(r.met).to.equal(met);
      expect(r.refused).to.equal(!!refused);
    });
  }

  it('stripThink handles closed, unclosed and stray tags', () => {
    expect(stripThink('<think>a</think>b')).to.equal('b');
    expect(stripThink('a<think>b')).to.equal('a');
    expect(stripThink('x</think>y')).to.equal('y');
  });

  const items = [
    { id: 'r1', text: 'Uses ablations' },
    { id: 'r2', text: 'Compares to baselines' },
    { id: 'g1', text: 'Is concrete' },
  ];
  it('per-plan: canonical JSON', () => {
    const v = parsePlanVerdicts('{"verdicts":[{"id":"r1","met":true},{"id":"r2","met":false},{"id":"g1","met":true}]}', items);
    expect(v.map((x) => x.met)).to.deep.equal([true, false, true]);
    expect(v.map((x) => x.itemId)).to.deep.equal(['r1', 'r2', 'g1']);
  });
  it('per-plan: fenced JSON after thinking, string values, missing item → null', () => {
    const raw = '<think>ok</think>Here you go:\n```json\n{"verdicts":[{"id":"r2","met":"No"},{"id":"r1","met":"yes"}]}\n```';
    expect(parsePlanVerdicts(raw, items).map((x) => x.met)).to.deep.equal([true, false, null]);
  });
  it('per-plan: id map and bracketed ids', () => {
    expect(parsePlanVerdicts('{"[r1]": true, "r2": {"met": false}, "g1": 1}', items).map((x) => x.met)).to.deep.equal([true, false, true]);
  });
  it('per-plan: positional fallback when ids do not match', () => {
    expect(parsePlanVerdicts('[{"met":false},{"met":true},{"met":false}]', items).map((x) => x.met)).to.deep.equal([false, true, false]);
  });
  it('per-plan: garbage → all null; refusal → refused', () => {
    expect(parsePlanVerdicts('not json', items).every((x) => x.met === null && !x.refused)).to.equal(true);
    expect(parsePlanVerdicts("I'm sorry, I can't grade this.", items).every((x) => x.met === null && x.refused)).to.equal(true);
  });

  it('prompts render every placeholder once and keep plan text literal', () => {
    const m = perItemMessage('Q?', 'plan with {{item}} inside', { id: 'a', text: 'ITEM' });
    expect(m).to.contain('Q?').and.contain('plan with {{item}} inside').and.contain('ITEM');
    expect(m).to.not.contain('<!--');
    expect(perItemMessage('Q', '   ', { id: 'a', text: 'x' })).to.contain('(empty)');
    const p = perPlanMessage('Q', 'P', items);
    expect(p).to.contain('- [r1] Uses ablations').and.contain('- [g1] Is concrete');
    expect(() => renderTemplate('{{nope}}', {})).to.throw(/nope/);
    expect(loadPrompt(PER_ITEM_PROMPT).hash).to.match(/^[0-9a-f]{16}$/);
  });
});

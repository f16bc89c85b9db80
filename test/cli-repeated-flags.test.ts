/**
 * Issue 50 item 5: a repeated scalar flag is an error naming it and its values, never a sum.
 * yargs-parser 21 reads a later value of exactly 1 as a count increment (`--opsd-steps 2
 * --opsd-steps 1` became 3 steps), so repeats are refused from the raw arguments.
 */
import { expect } from 'chai';
import { repeatedFlag } from '../bin/cli-util.js';
import '../lib/index.js';
import { commandSettings } from '../lib/config/settings.js';
import { cli } from './helpers/run.js';

describe('repeated flags (issue 50 item 5)', function () {
  this.timeout(60000);

  it('repeatedFlag: scalars given twice in any spelling are named with their values; repeatable lists and booleans are not', () => {
    const train = commandSettings().train!;
    expect(repeatedFlag(['train', '--opsd-steps', '2', '--opsd-steps', '1'], train)).to.equal('--opsd-steps: given more than once (2, 1)');
    expect(repeatedFlag(['train', '--opsd-steps=2', '--opsdSteps', '1'], train)).to.equal('--opsd-steps: given more than once (2, 1)');
    expect(repeatedFlag(['train', '--data', 'a.jsonl', '--data=b.jsonl'], train)).to.equal('--data: given more than once ("a.jsonl", "b.jsonl")');
    expect(repeatedFlag(['train', '--opsd-steps', '2', '--grpo-steps', '1'], train)).to.equal(undefined);
    expect(repeatedFlag(['train', '--strict', '--no-strict'], train)).to.equal(undefined);
    // After a bare `--` nothing is a flag.
    expect(repeatedFlag(['train', '--opsd-steps', '2', '--', '--opsd-steps', '1'], train)).to.equal(undefined);
    const generate = commandSettings().generate!;
    expect(repeatedFlag(['generate', '--prompt', 'a', '--prompt', 'b'], generate)).to.equal(undefined);
    expect(repeatedFlag(['generate', '--n', '4', '--n', '1'], generate)).to.equal('--n: given more than once (4, 1)');
  });

  it('the CLI refuses `--opsd-steps 2 --opsd-steps 1` (once summed to 3 steps) before anything runs', async () => {
    const r = await cli(['train', '--opsd-steps', '2', '--opsd-steps', '1']);
    expect([r.code, r.err.trim()]).to.deep.equal([1, 'papergym-native: --opsd-steps: given more than once (2, 1)']);
    const g = await cli(['generate', '--max-new-tokens', '8', '--max-new-tokens=1', '--prompt', 'hi']);
    expect([g.code, g.err.trim()]).to.deep.equal([1, 'papergym-native: --max-new-tokens: given more than once (8, 1)']);
  });
});

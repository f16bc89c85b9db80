/**
 * Judge backends (lib/judge/backends/): one descriptor per kind, one registry. A new kind is one
 * descriptor and one `register` line: a fake kind registered here is opened, checked, labelled and
 * planned for through the same functions train / eval / probe-judge call, and a backend made of
 * sub-judges (a jury-like one) opens a real HTTP judge (loopback fake server) through the context.
 * The echo kind brings its own setting (a row and a key rule in its descriptor): it is a `--judge`
 * choice, read from YAML and from train's and eval's flags, documented, and refused when mistyped.
 */
import { expect } from 'chai';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import yargs, { type Argv } from 'yargs';
import {
  JUDGE_BACKENDS,
  checkJudge,
  judgeAnswersFreeForm,
  judgeBackend,
  judgeLabel,
  judgeSharesPolicyWeights,
  judgeWithAnswerCache,
  openJudge,
  type JudgeBackend,
  type JudgeBackendOf,
} from '../lib/judge/backends/index.js';
import { JUDGE_DEFAULTS, judgeConfigProblems, judgeKinds, judgeSettings, type JudgeConfig } from '../lib/config/judge.js';
import { commandSettings, trainSettings } from '../lib/config/settings.js';
import { renderConfigDocs } from '../lib/config/docs.js';
import { flagsToConfig, trainCommand } from '../bin/commands/train.js';
import { addJudgeOptions, judgeConfigFromArgs } from '../bin/judge-options.js';
import { emptyStats, type Judge, type JudgeRequest, type Verdict } from '../lib/judge/types.js';
import { planForRun, QWEN3_SHAPES } from '../lib/train/memory-plan.js';
import { readConfigFile, resolveConfig } from '../lib/config/train.js';
import { Registry } from '../lib/util/registry.js';
import { startFakeLlm } from './helpers/fake-llm.js';

/** The built-in kinds in registration order (lib/judge/backends/index.ts), as this test expects them. */
const JUDGE_KINDS = ['local', 'http', 'jury'] as const;

/** A judge that says "met" for every item whose text contains the plan's first word. */
function echoJudge(name: string): Judge {
  const s = emptyStats();
  return {
    name,
    async judge(reqs: JudgeRequest[]): Promise<Verdict[][]> {
      return reqs.map((r) => r.items.map((it) => ({ itemId: it.id, met: it.text.includes(r.plan.split(' ')[0] ?? '') })));
    },
    stats: () => ({ ...s }),
  };
}

describe('judge backends: the registry', () => {
  it('says which kinds answer free-form questions and cache answers (eval and compare ask this, not the kind name)', () => {
    const http = { ...JUDGE_DEFAULTS, kind: 'http', url: 'http://127.0.0.1:1/v1', model: 'm' } as JudgeConfig;
    const local = { ...JUDGE_DEFAULTS, kind: 'local' } as JudgeConfig;
    expect(judgeAnswersFreeForm(http)).to.equal(true);
    expect(judgeAnswersFreeForm(local)).to.equal(false);
    expect(judgeWithAnswerCache(http, '/tmp/a.sqlite').cache).to.equal('/tmp/a.sqlite');
    expect(judgeWithAnswerCache({ ...http, cache: '/tmp/b.sqlite' } as JudgeConfig, '/tmp/a.sqlite').cache).to.equal('/tmp/b.sqlite');
    // The local judge keeps its verdicts too (keyed by its model's files: lib/judge/local-cache.ts); a jury's members inherit the section's cache.
    expect(judgeWithAnswerCache(local, '/tmp/a.sqlite').cache).to.equal('/tmp/a.sqlite');
    expect(judgeWithAnswerCache({ ...JUDGE_DEFAULTS, kind: 'jury' } as JudgeConfig, '/tmp/a.sqlite').cache).to.equal('/tmp/a.sqlite');
  });

  it('registers the built-in kinds (JUDGE_KINDS); the --judge choices are the registered kinds', () => {
    expect(JUDGE_BACKENDS.names()).to.deep.equal([...JUDGE_KINDS]);
    expect(judgeKinds()).to.deep.equal([...JUDGE_KINDS]);
    expect(judgeSettings().find((s) => s.key === 'kind')!.choices).to.deep.equal([...JUDGE_KINDS]);
    // Every kind-specific key a backend reads is a judge setting.
    const keys = new Set(judgeSettings().map((s) => s.key));
    for (const b of JUDGE_BACKENDS.values()) for (const k of b.settingKeys) expect(keys.has(k), `${b.kind}: ${k}`).to.equal(true);
  });

  it('an unknown kind is refused naming the setting and the registered kinds; a name registered twice is refused', () => {
    expect(() => judgeBackend({ kind: 'nope' as never })).to.throw(/judge\.kind \(--judge\): unknown judge backend "nope" \(registered: local, http, jury\)/);
    expect(() => JUDGE_BACKENDS.register(JUDGE_BACKENDS.get('http'))).to.throw(/'http' is registered twice/);
    const r = new Registry<{ name: string }>('thing', (t) => t.name).register({ name: 'a' }, { name: 'b' });
    expect(r.names()).to.deep.equal(['a', 'b']);
    expect(r.find('c')).to.equal(undefined);
    expect(() => r.register({ name: '' })).to.throw(/without a name/);
  });

  it('the built-in kinds: local shares the policy weights (the memory plan counts it), http does not; labels as before', () => {
    const local: JudgeConfig = { ...JUDGE_DEFAULTS, kind: 'local' };
    const http: JudgeConfig = { ...JUDGE_DEFAULTS, kind: 'http', url: 'http://127.0.0.1:9/v1', model: 'm' };
    expect(judgeSharesPolicyWeights(local)).to.equal(true);
    expect(judgeSharesPolicyWeights(http)).to.equal(false);
    expect(judgeLabel(local)).to.equal('local');
    expect(judgeLabel(http)).to.equal('m@http://127.0.0.1:9/v1');
    expect(judgeConfigProblems({ ...http, url: null })).to.deep.equal(['judge.kind http needs judge.url and judge.model']);
    expect(judgeConfigProblems({ ...http, score: 'prob', mode: 'per-plan' })[0]).to.match(/score prob needs judge\.mode per-item/);
  });

  it('a local judge without a policy or a model dir fails with a clear error', async () => {
    let err: Error | undefined;
    await openJudge({ ...JUDGE_DEFAULTS, kind: 'local' }).catch((e: Error) => (err = e));
    expect(err?.message).to.match(/--judge local needs a model/);
  });
});

describe('judge backends: a new kind is one descriptor and one register line', () => {
  const opened: string[] = [];
  // A fake kind on the policy's weights, and a jury-like kind whose members are other judges.
  const fake: JudgeBackend = {
    kind: 'fake' as never,
    describe: 'test: a judge on the policy weights',
    settingKeys: ['batch'],
    sharesPolicyWeights: () => true,
    label: (c) => `fake:${c.batch}`,
    async check(c) {
      if (c.batch > 100) throw new Error('fake judge: judge.batch too large');
    },
    async open(c, ctx) {
      opened.push(`fake batch ${c.batch} policy ${ctx.policy ? 'given' : 'none'} tokens ${ctx.maxTokensPerCall}`);
      return echoJudge(`fake:${c.batch}`);
    },
  };
  const jury: JudgeBackend = {
    kind: 'pair-jury' as never,
    describe: 'test: met when both members say met (an http judge and a fake one)',
    settingKeys: ['url', 'model'],
    sharesPolicyWeights: (c) => judgeSharesPolicyWeights({ ...c, kind: 'fake' as never }) || judgeSharesPolicyWeights({ ...c, kind: 'http' }),
    label: (c) => `jury(${c.model}@${c.url}, fake)`,
    async open(c, ctx) {
      const members = [await ctx.openJudge({ ...c, kind: 'http' }), await ctx.openJudge({ ...c, kind: 'fake' as never })];
      return {
        name: 'pair-jury',
        async judge(reqs) {
          const votes = await Promise.all(members.map((m) => m.judge(reqs)));
          return reqs.map((r, i) => r.items.map((it, k) => ({ itemId: it.id, met: votes.every((v) => v[i]![k]!.met === true) })));
        },
        stats: () => members[0]!.stats(),
        async close() {
          for (const m of members) await m.close?.();
        },
      };
    },
  };
  before(() => JUDGE_BACKENDS.register(fake, jury));
  after(() => {
    JUDGE_BACKENDS.unregister('fake');
    JUDGE_BACKENDS.unregister('pair-jury');
  });

  it('opens, checks and labels the registered kind through the functions train and eval call; the memory plan counts a judge on the policy weights', async () => {
    const c = { ...JUDGE_DEFAULTS, kind: 'fake', batch: 7 } as unknown as JudgeConfig;
    const j = await openJudge(c, { maxTokensPerCall: 4096 });
    expect(
      await j.judge([
        {
          question: 'q',
          plan: 'alpha beta',
          items: [
            { id: 'a', text: 'has alpha' },
            { id: 'b', text: 'none' },
          ],
        },
      ]),
    ).to.deep.equal([
      [
        { itemId: 'a', met: true },
        { itemId: 'b', met: false },
      ],
    ]);
    expect(opened).to.deep.equal(['fake batch 7 policy none tokens 4096']);
    expect(judgeLabel(c)).to.equal('fake:7');
    await checkJudge(c);
    let err: Error | undefined;
    await checkJudge({ ...c, batch: 101 }).catch((e: Error) => (err = e));
    expect(err?.message).to.match(/judge\.batch too large/);
    // The memory plan asks the backend: the fake kind's working memory is counted as the local judge's.
    const cfg = resolveConfig({ preset: 'qwen3-1.7b' });
    const withFake = { ...cfg, judge: c };
    const withHttp = { ...cfg, judge: { ...cfg.judge, kind: 'http', url: 'http://127.0.0.1:9/v1', model: 'm' } as JudgeConfig };
    const inputs = { shape: QWEN3_SHAPES['qwen3-1.7b'], promptTokens: { student: 207, teacher: 525 }, deviceMemoryBytes: 141e9, pinned: {} };
    expect(planForRun(structuredClone(withFake), inputs)!.plan.phases.judge).to.be.above(0);
    expect(planForRun(structuredClone(withHttp), inputs)!.plan.phases.judge).to.equal(undefined);
  });

  it('a backend made of sub-judges opens its members through the context: a real HTTP judge (loopback server) and the fake one', async () => {
    const srv = await startFakeLlm({ respond: (req) => (String(req.body.messages.at(-1)?.content ?? '').includes('alpha') ? 'Yes' : 'No') });
    try {
      const c = { ...JUDGE_DEFAULTS, kind: 'pair-jury', url: srv.url, model: 'j', maxRetries: 0 } as unknown as JudgeConfig;
      expect(judgeSharesPolicyWeights(c)).to.equal(true);
      const j = await openJudge(c);
      const v = await j.judge([
        {
          question: 'q',
          plan: 'alpha plan',
          items: [
            { id: 'a', text: 'uses alpha' },
            { id: 'b', text: 'uses gamma' },
          ],
        },
      ]);
      expect(v[0]!.map((x) => x.met)).to.deep.equal([true, false]);
      expect(srv.log.length).to.equal(2);
      await j.close?.();
    } finally {
      await srv.close();
    }
  });
});

// The echo kind's typing: its name and its own key, by declaration merging from its file (here, the test).
declare module '../lib/config/judge.js' {
  interface JudgeKindNames {
    echo: true;
  }
  interface JudgeSettings {
    /** echo: the word an item must contain to be met (null: the plan's first word). */
    echoWord?: string | null;
  }
}

describe('judge backends: a new kind brings its own settings (one descriptor, one register line, nothing else edited)', () => {
  const echoBackend: JudgeBackendOf<'echo'> = {
    kind: 'echo',
    describe: "met when the item text contains judge.echoWord (unset: the plan's first word)",
    settingKeys: ['echoWord'],
    settings: [
      {
        key: 'echoWord',
        flag: 'judge-echo-word',
        type: 'string',
        default: null,
        pattern: /^[a-z]+$/,
        values: 'one lower-case word',
        meaning: "echo: the word an item must contain to be met; unset = the plan's first word",
        source: 'test/judge-backends.test.ts (a registered backend with a setting of its own)',
      },
    ],
    settingsProblems: (c, prefix) => (c.score === 'prob' ? [`${prefix}score prob: the echo judge gives no P(yes) (use ${prefix}score binary)`] : []),
    sharesPolicyWeights: () => false,
    label: (c) => `echo:${c.echoWord ?? 'first-word'}`,
    async open(c) {
      const s = emptyStats();
      return {
        name: `echo:${c.echoWord ?? 'first-word'}`,
        async judge(reqs: JudgeRequest[]): Promise<Verdict[][]> {
          return reqs.map((r) => r.items.map((it) => ({ itemId: it.id, met: it.text.includes(c.echoWord ?? r.plan.split(' ')[0] ?? '') })));
        },
        stats: () => ({ ...s }),
      };
    },
  };
  /** `train`'s real yargs builder over `args`; a check failure throws its message. */
  const parseTrain = (args: string[]) =>
    (trainCommand.builder as (y: Argv) => Argv)(yargs().exitProcess(false))
      .fail((msg, err) => {
        throw err ?? new Error(msg);
      })
      .parseSync(args) as Record<string, unknown>;
  let tmp = '';
  before(() => {
    JUDGE_BACKENDS.register(echoBackend);
    tmp = mkdtempSync(join(tmpdir(), 'pg-echo-judge-'));
  });
  after(() => {
    JUDGE_BACKENDS.unregister('echo');
    rmSync(tmp, { recursive: true, force: true });
  });

  it('is a --judge choice; its row is a judge.* key of train, a --judge-* option of eval, and in docs/config.md', () => {
    expect(judgeKinds()).to.deep.equal([...JUDGE_KINDS, 'echo']);
    expect(judgeSettings().at(-1)!.key).to.equal('echoWord');
    const train = trainSettings().find((s) => s.key === 'judge.echoWord')!;
    expect(train.flag).to.equal('judge-echo-word');
    expect(trainSettings().find((s) => s.key === 'judge.kind')!.choices).to.include('echo');
    for (const cmd of ['eval', 'probe-judge', 'compare', 'judge-agreement'])
      expect(commandSettings()[cmd]!.find((s) => s.flag === 'judge-echo-word')?.key, cmd).to.equal('judgeEchoWord');
    const docs = renderConfigDocs();
    expect(docs).to.contain('| `--judge-echo-word` | `judge.echoWord` | string | `unset` | one lower-case word | echo: the word an item must contain');
    expect(docs).to.contain('local \\| http \\| jury \\| echo');
  });

  it('is read from a YAML config and from the train and eval flags, and the judge opened with it uses it', async () => {
    const file = join(tmp, 'echo.yaml');
    writeFileSync(file, 'judge:\n  kind: echo\n  echoWord: alpha\n');
    const fromFile = resolveConfig({ file });
    expect([fromFile.judge.kind, fromFile.judge.echoWord]).to.deep.equal(['echo', 'alpha']);
    expect(resolveConfig({}).judge.echoWord, 'the default').to.equal(null);
    const fromFlags = resolveConfig({ file, flags: flagsToConfig(parseTrain(['--judge-echo-word', 'beta'])) });
    expect(fromFlags.judge.echoWord).to.equal('beta');
    const evalArgs = addJudgeOptions(yargs().exitProcess(false)).parseSync(['--judge', 'echo', '--judge-echo-word', 'gamma']);
    const c = judgeConfigFromArgs(evalArgs);
    expect([c.kind, c.echoWord, judgeLabel(c)]).to.deep.equal(['echo', 'gamma', 'echo:gamma']);
    const j = await openJudge(c);
    const items = [
      { id: 'a', text: 'uses gamma' },
      { id: 'b', text: 'uses alpha' },
    ];
    expect((await j.judge([{ question: 'q', plan: 'alpha plan', items }]))[0]!.map((v) => v.met)).to.deep.equal([true, false]);
  });

  it('is a jury member (members: any registered kind without members), checked as a judge of its own kind, and judges inside the jury', async () => {
    const jury = (judges: unknown[]): JudgeConfig => ({ ...JUDGE_DEFAULTS, kind: 'jury', judges: judges as JudgeConfig['judges'] });
    const members = [
      { name: 'e1', kind: 'echo', echoWord: 'alpha' },
      { name: 'e2', kind: 'echo', echoWord: 'beta' },
      { name: 'e3', kind: 'echo' },
    ];
    expect(judgeConfigProblems(jury(members))).to.deep.equal([]);
    expect(judgeConfigProblems(jury([members[0], { name: 'e2', kind: 'echo', echoWord: 'Bad' }]))).to.deep.equal([
      'judge.judges[1].echoWord (--judge-echo-word) must be one lower-case word (got "Bad")',
    ]);
    expect(judgeConfigProblems(jury([members[0], { name: 'j', kind: 'jury' }]))[0]).to.equal('judge.judges[1].kind must be local or http or echo (got "jury")');
    // a kind without members reads no judges list; the message names the kinds that do
    expect(judgeConfigProblems({ ...JUDGE_DEFAULTS, kind: 'echo', judges: members as JudgeConfig['judges'] })).to.deep.equal([
      'judge.judges is only read by judge.kind jury (got kind "echo")',
    ]);
    const j = await openJudge({ ...jury(members), aggregation: 'majority' });
    try {
      const items = [
        { id: 'a', text: 'alpha and beta' }, // e1 yes, e2 yes, e3 (first word "gamma") no: met
        { id: 'b', text: 'alpha only' }, // e1 yes, e2 no, e3 no: not met
      ];
      const v = (await j.judge([{ question: 'q', plan: 'gamma plan', items }]))[0]!;
      expect(v.map((x) => x.met)).to.deep.equal([true, false]);
    } finally {
      await j.close?.();
    }
  });

  it('is refused with an error naming the key and flag when mistyped (YAML, flags, its key rule), and a taken flag is refused', () => {
    const bad = (yaml: string) => {
      const file = join(tmp, 'bad.yaml');
      writeFileSync(file, yaml);
      return () => resolveConfig({ file });
    };
    expect(bad('judge:\n  kind: echo\n  echoWord: Two Words\n')).to.throw(
      /judge\.echoWord \(--judge-echo-word\) must be one lower-case word \(got "Two Words"\)/,
    );
    expect(bad('judge:\n  kind: echo\n  echoWord: 3\n')).to.throw(/judge\.echoWord \(--judge-echo-word\) must be a string/);
    writeFileSync(join(tmp, 'typo.yaml'), 'judge:\n  echoWrod: alpha\n');
    expect(() => readConfigFile(join(tmp, 'typo.yaml'))).to.throw(/unknown key judge\.echoWrod/);
    expect(() => parseTrain(['--judge-echo-word', 'UPPER'])).to.throw(/judge\.echoWord \(--judge-echo-word\) must be one lower-case word \(got "UPPER"\)/);
    expect(() =>
      addJudgeOptions(
        yargs()
          .exitProcess(false)
          .fail((m, e) => {
            throw e ?? new Error(m);
          }),
      ).parseSync(['--judge-echo-word', '1']),
    ).to.throw(/judge\.echoWord \(--judge-echo-word\) must be one lower-case word/);
    expect(bad('judge:\n  kind: echo\n  score: prob\n')).to.throw(/judge\.score prob: the echo judge gives no P\(yes\)/);
    expect(judgeConfigProblems({ ...JUDGE_DEFAULTS, kind: 'echo', echoWord: 'Bad' })).to.deep.equal([
      'judge.echoWord (--judge-echo-word) must be one lower-case word (got "Bad")',
    ]);
    // A row whose flag another setting has is refused, naming both.
    const clash: JudgeBackend = {
      ...JUDGE_BACKENDS.get('http'),
      kind: 'clash' as never,
      settings: [{ ...echoBackend.settings![0]!, key: 'clashUrl', flag: 'judge-url' }],
    };
    JUDGE_BACKENDS.register(clash);
    try {
      expect(() => judgeSettings()).to.throw(/judge backend clash: flag --judge-url of clashUrl is already the flag of url/);
    } finally {
      JUDGE_BACKENDS.unregister('clash');
    }
    expect(judgeKinds()).to.deep.equal([...JUDGE_KINDS, 'echo']);
  });
});

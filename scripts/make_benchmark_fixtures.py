#!/usr/bin/env python3
"""Writes small files in each published benchmark schema into data/benchmarks/ (committed, shipped in the
npm package so docs/eval.md's walkthrough runs on an installed package).

The rows are this project's own, written for the tests; no published row is copied. The schemas
are the checked facts of /work/shared/BENCHMARKS.md (docs/data.md "Importing published benchmarks"):
ResearchQA JSON lists, ResearchPlanGen Hub Parquet ({config}/{split}/*.parquet), HealthBench JSONL,
RubricHub Parquet (one file per domain, verl style), RaR Parquet (data/{split}-*).
test/fixtures/benchmarks-bad/ (not shipped) holds the bad-input cases (truncated JSON, Parquet without the expected columns, an item without criterion
text, a weight that is not a number).

Usage: python3 scripts/make_benchmark_fixtures.py [OUT_DIR [BAD_DIR]]   (needs pyarrow)
"""
import json
import os
import sys

import pyarrow as pa
import pyarrow.parquet as pq

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..', 'data', 'benchmarks')
BAD = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), '..', 'test', 'fixtures', 'benchmarks-bad')


def path(*parts):
    p = os.path.join(BAD, *parts[1:]) if parts[0] == 'bad' else os.path.join(OUT, *parts)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    return p


def write_json(rows, *parts):
    with open(path(*parts), 'w') as f:
        json.dump(rows, f, indent=1)
        f.write('\n')


def write_jsonl(rows, *parts):
    with open(path(*parts), 'w') as f:
        for r in rows:
            f.write(json.dumps(r) + '\n')


def write_parquet(rows, schema, *parts, compression='snappy'):
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path(*parts), compression=compression)


# ---- ResearchQA: JSON list, query + rubric[].rubric_item / type (≤ 8 items per query) ----
rqa = [
    {'id': 'rqa-1', 'query': 'How does curriculum ordering affect sample efficiency in offline reinforcement learning?',
     'rubric': [{'rubric_item': 'Names at least one curriculum strategy for offline RL', 'type': 'explanation'},
                {'rubric_item': 'Compares curriculum ordering with uniform replay', 'type': 'comparison'},
                {'rubric_item': 'States a limitation of curriculum methods on narrow datasets', 'type': 'limitation'}]},
    {'id': 'rqa-2', 'query': 'What are the trade-offs of sparse attention for long-document summarisation?',
     'rubric': [{'rubric_item': 'Explains the memory saving of sparse attention', 'type': 'explanation'},
                {'rubric_item': 'Mentions a loss of long-range dependencies', 'type': 'limitation'}]},
]
write_json(rqa, 'researchqa', 'test.json')
write_json([{'id': 'rqa-v1', 'query': 'Why do contrastive objectives need large batches?',
             'rubric': [{'rubric_item': 'Relates batch size to the number of negatives', 'type': 'explanation'}]}], 'researchqa', 'valid.json')

# ---- ResearchPlanGen: Parquet {config}/{split}/*.parquet; Goal, Rubric (list of str), Reference solution ----
rpg_schema = pa.schema([('Goal', pa.string()), ('Rubric', pa.list_(pa.string())), ('Reference solution', pa.string()),
                        ('article_id', pa.string()), ('q_id', pa.string())])
rpg = {
    ('ml', 'test'): [
        {'Goal': 'Design a method to detect label noise in crowdsourced image datasets without a clean validation set.',
         'Rubric': ['Proposes a noise estimate that needs no clean labels', 'Evaluates on at least two noise rates', 'Compares with a co-teaching baseline'],
         'Reference solution': 'Train two networks and flag samples on which their small-loss sets disagree; evaluate at 20% and 40% symmetric noise.',
         'article_id': 'a-ml-1', 'q_id': 'q-ml-1'},
        {'Goal': 'Reduce the cost of hyper-parameter search for small language models.',
         'Rubric': ['Uses a low-fidelity proxy such as fewer steps', 'Reports the compute saved'],
         'Reference solution': 'Successive halving over learning rate and warm-up with 10% of the training steps.',
         'article_id': 'a-ml-2', 'q_id': 'q-ml-2'},
    ],
    ('ml', 'train'): [
        {'Goal': 'Measure whether data deduplication changes downstream accuracy.',
         'Rubric': ['Defines the deduplication criterion'], 'Reference solution': 'MinHash near-duplicate removal at Jaccard 0.8.',
         'article_id': 'a-ml-3', 'q_id': 'q-ml-3'},
    ],
    ('arxiv', 'test'): [
        {'Goal': 'Estimate dark-matter halo masses from galaxy rotation curves with uncertainty.',
         'Rubric': ['Models the uncertainty of the inferred mass', 'Validates on simulated halos'],
         'Reference solution': 'Hierarchical Bayesian fit of NFW profiles, checked on simulated halos.',
         'article_id': 'a-ax-1', 'q_id': 'q-ax-1'},
    ],
}
for (config, split), rows in rpg.items():
    write_parquet(rows, rpg_schema, 'research-plan-gen', config, split, '0000.parquet')

# ---- HealthBench: JSONL; prompt (chat), rubrics[].criterion / points / tags, example_tags, ideal_completions_data ----
hb = [
    {'prompt_id': 'hb-1',
     'prompt': [{'role': 'user', 'content': 'I have had a mild headache for two days. What can I do at home?'}],
     'rubrics': [{'criterion': 'Suggests rest and fluids', 'points': 5, 'tags': ['level:example', 'axis:completeness']},
                 {'criterion': 'Advises seeing a doctor if the headache worsens suddenly', 'points': 7, 'tags': ['level:example', 'axis:accuracy']},
                 {'criterion': 'Recommends a prescription-only drug without caveats', 'points': -6, 'tags': ['level:example', 'axis:accuracy']}],
     'example_tags': ['theme:global_health'],
     'ideal_completions_data': {'ideal_completion': 'Rest, drink water and use an over-the-counter pain reliever as directed; seek care if it worsens suddenly.'}},
    {'prompt_id': 'hb-2',
     'prompt': [{'role': 'user', 'content': 'Can I take ibuprofen?'},
                {'role': 'assistant', 'content': 'It depends on your health. Do you have kidney problems or stomach ulcers?'},
                {'role': 'user', 'content': 'No, neither.'}],
     'rubrics': [{'criterion': 'States a usual adult dose range', 'points': 4, 'tags': ['level:example', 'axis:completeness']},
                 {'criterion': 'Uses jargon without explaining it', 'points': -2, 'tags': ['level:cluster', 'axis:communication_quality']}],
     'example_tags': ['theme:context_seeking'], 'ideal_completions_data': None},
]
write_jsonl(hb, 'healthbench', 'healthbench.jsonl')

# ---- RubricHub: Parquet per domain; prompt (chat list), Rubrics[].criterion / points, reward_model{ground_truth, rubrics} ----
crit = pa.struct([('criterion', pa.string()), ('points', pa.int64())])
rh_schema = pa.schema([
    ('data_source', pa.string()),
    ('prompt', pa.list_(pa.struct([('role', pa.string()), ('content', pa.string())]))),
    ('Rubrics', pa.list_(crit)),
    ('reward_model', pa.struct([('ground_truth', pa.string()), ('rubrics', pa.list_(crit)), ('style', pa.string())])),
    ('extra_info', pa.struct([('index', pa.int64())])),
])
rh_crit1 = [{'criterion': 'Gives the correct unit for the answer', 'points': 3}, {'criterion': 'Explains each step of the derivation', 'points': 5},
            {'criterion': 'Contains an arithmetic error', 'points': -4}]
rh_crit2 = [{'criterion': 'Names the enzyme that catalyses the reaction', 'points': 4}]
rh = [
    {'data_source': 'science', 'prompt': [{'role': 'user', 'content': 'A 2 kg mass falls 5 m. What kinetic energy does it reach (g = 9.8 m/s^2)?'}],
     'Rubrics': rh_crit1, 'reward_model': {'ground_truth': '98 J', 'rubrics': rh_crit1, 'style': 'rubric'}, 'extra_info': {'index': 0}},
    {'data_source': 'science', 'prompt': [{'role': 'system', 'content': 'Answer briefly.'}, {'role': 'user', 'content': 'Which enzyme unwinds DNA during replication?'}],
     'Rubrics': rh_crit2, 'reward_model': {'ground_truth': '', 'rubrics': rh_crit2, 'style': 'rubric'}, 'extra_info': {'index': 1}},
]
write_parquet(rh, rh_schema, 'rubrichub', 'Science.parquet', compression='zstd')

# ---- RaR: Parquet data/{split}-*; question, reference_answer, rubric[].description / title / weight, rubric_list ----
rar_schema = pa.schema([
    ('question', pa.string()), ('reference_answer', pa.string()),
    ('rubric', pa.list_(pa.struct([('description', pa.string()), ('title', pa.string()), ('weight', pa.int64())]))),
    ('rubric_list', pa.list_(pa.string())),
])
rar = [
    {'question': 'Why does ice float on water?', 'reference_answer': 'Ice is less dense than liquid water because hydrogen bonds hold it in an open lattice.',
     'rubric': [{'description': 'Essential Criteria: states that ice is less dense than liquid water', 'title': 'Density', 'weight': 5},
                {'description': 'Important Criteria: attributes the lower density to hydrogen bonding', 'title': 'Mechanism', 'weight': 3},
                {'description': 'Optional Criteria: mentions the density maximum near 4 °C', 'title': 'Detail', 'weight': 1},
                {'description': 'Pitfall Criteria: claims ice floats because it contains air', 'title': 'Air myth', 'weight': -2}],
     'rubric_list': ['states that ice is less dense than liquid water']},
    {'question': 'What limits the resolution of an optical microscope?', 'reference_answer': 'Diffraction: about half the wavelength of the light.',
     'rubric': [{'description': 'Essential Criteria: names diffraction as the limit', 'title': 'Diffraction', 'weight': 5},
                {'description': 'Pitfall Criteria: says magnification alone sets the resolution', 'title': 'Magnification', 'weight': -1}],
     'rubric_list': ['names diffraction as the limit']},
]
write_parquet(rar, rar_schema, 'rar', 'data', 'test-00000-of-00001.parquet', compression='gzip')

# ---- bad input ----
with open(path('bad', 'truncated.json'), 'w') as f:
    f.write(json.dumps(rqa)[:150])
write_parquet([{'question': 'A row without a rubric column', 'answer': 'x'}], pa.schema([('question', pa.string()), ('answer', pa.string())]), 'bad', 'no-rubric.parquet')
write_json([rqa[0], {'id': 'rqa-empty', 'query': 'A query whose second item has no criterion text',
                     'rubric': [{'rubric_item': 'A real item', 'type': 'explanation'}, {'rubric_item': '   ', 'type': 'explanation'}]}], 'bad', 'no-criterion.json')
with open(path('bad', 'weights.jsonl'), 'w') as f:
    f.write(json.dumps(hb[0]) + '\n')
    f.write(json.dumps({'prompt_id': 'hb-bad', 'prompt': [{'role': 'user', 'content': 'Is this safe?'}],
                        'rubrics': [{'criterion': 'Answers the question', 'points': 'five', 'tags': []}]}) + '\n')
    f.write(json.dumps(hb[1])[:60] + '\n')
print(f'benchmark fixtures written to {os.path.normpath(OUT)}')

#!/usr/bin/env python3
"""Count what sweep.py found, by direction, and draw 50 of each to read."""
import json, random, collections
recs=[json.loads(l) for l in open('directory-results.jsonl') if '"error"' not in l[:80]]
NONIDEM={'append','increment','decrement','external','create'}
stricter=[r for r in recs if r['method'] in ('PUT','DELETE') and r['effect_source']=='inferred' and r['effect'] in NONIDEM]
quieter=[r for r in recs if r['read_warning']]
keyed=[r for r in recs if r['key_evidence'] and r['method'] not in ('GET','HEAD','OPTIONS','TRACE')]
print('operations', len(recs))
by=collections.Counter(r['method'] for r in recs)
print('by method', dict(by))
print('A. PUT/DELETE safe -> unsafe/keyed (words say a repeat repeats):', len(stricter), collections.Counter((r['method'], r['class']) for r in stricter))
print('   by effect', collections.Counter(r['effect'] for r in stricter))
print('B. POST error -> warning (words read as a query):', len(quieter))
print('C. unsafe -> keyed (a key described in words):', len(keyed), collections.Counter(r['key_in'] for r in keyed))
print('   C by provider', collections.Counter(r['doc'].split('/')[0] for r in keyed).most_common(8))
posts=[r for r in recs if r['method']=='POST']
errs=[r for r in posts if r['class']=='unsafe' and not r['read_warning']]
print('POSTs', len(posts), 'still unkeyed errors', len(errs))
rnd=random.Random(50)
def sample(rs,n=50):
    rs=list(rs); rnd.shuffle(rs); return rs[:n]
with open('directory-sample.jsonl','w') as f:
    for name,rs in (('A',stricter),('B',quieter),('C',keyed)):
        for r in sample(rs):
            r=dict(r); r['direction']=name
            f.write(json.dumps(r)+'\n')

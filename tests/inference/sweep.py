#!/usr/bin/env python3
"""Audit every document of APIs.guru's directory and keep, per operation,
what the audit read from its words (by hand, never in CI).

Usage: sweep.py DIRECTORY_API_DIR [IDEM_BINARY] > log
Writes directory-results.jsonl; analyze.py counts the operations that
change class, by direction, and draws 50 of each for reading by hand.
"""
import json, os, subprocess, sys, random, concurrent.futures as cf
import sys as _sys
ROOT=_sys.argv[1]  # APIs.guru's api/ folder
IDEM=_sys.argv[2] if len(_sys.argv) > 2 else 'target/release/idem'
files=[]
for r,ds,fs in os.walk(ROOT):
    for f in fs:
        if f.endswith(('.json','.yaml')) and f not in ('_index.js',):
            files.append(os.path.join(r,f))
files.sort()
def run(path):
    try:
        p=subprocess.run([IDEM,'audit','--format','json',path],capture_output=True,timeout=300)
    except subprocess.TimeoutExpired:
        return path,None,'timeout'
    if p.returncode not in (0,1):
        return path,None,p.stderr.decode(errors='replace')[:200]
    try:
        return path,json.loads(p.stdout),None
    except Exception as e:
        return path,None,str(e)
out=open('directory-results.jsonl','w')
stats={'docs':0,'failed':0,'ops':0}
with cf.ThreadPoolExecutor(2) as ex:
    for path,v,err in ex.map(run,files):
        rel=os.path.relpath(path,ROOT)
        stats['docs']+=1
        if v is None:
            stats['failed']+=1
            out.write(json.dumps({'doc':rel,'error':err})+'\n'); continue
        ro={(d['method'],d['path']):d for d in v['diagnostics'] if d['rule']=='undeclared-read-only'}
        for o in v['operations']:
            stats['ops']+=1
            rec={'doc':rel,'method':o['method'],'path':o['path'],'operation_id':o['operation_id'],'class':o['class'],'effect':o['effect'],'effect_source':o['effect_source'],'effect_evidence':o.get('effect_evidence'),'key_source':o['key_source'],'key_in':o['key_in'],'key_name':o['key_name'],'key_evidence':o.get('key_evidence'),'read_warning':(o['method'],o['path']) in ro}
            out.write(json.dumps(rec)+'\n')
print(stats)

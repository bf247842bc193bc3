import sys,json
for l in sys.stdin:
    if not l.startswith('{'): print(l.strip()[:300]); continue
    j=json.loads(l.split('  GB/s')[0]); g=eval(l.split('GB/s:')[1].split('TFLOP')[0])
    best=min(x for x in (j['sdpa_flash'],j['cudnn']) if x)
    print(j['kind'],'b',j['b'],'L',j['L'],'sq',j['sq'],'h',j['h'],j['hk'],'d',j['d'],'sp',j.get('ours_splits'),'us: fa2 %.1f cudnn %.1f read %.1f ours %.1f (split %.1f) | vs best %.2f  ceil %.2f'%(j['sdpa_flash'] or 0,j['cudnn'] or 0,j['read'],j['ours_kernels'],j.get('ours_split_pass',0),best/j['ours_kernels'],j['read']/j['ours_kernels']), l.split('TFLOP/s:')[1].strip() if 'TFLOP/s:' in l else '')

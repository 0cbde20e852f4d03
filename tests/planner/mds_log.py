"""Megatron-DeepSpeed log lines in the exact print formats of the pinned commit (6acc370a):
megatron/training.py training_log (lines 1146-1191), megatron/utils.py report_memory (108-122) and
megatron/arguments.py _print_args (463-475). Used to write log fixtures for the calibration tests."""


def mds_log(step_ms, train_iters=20, gbs=64, seq=2048, args=None, stop=None,
            mem=(1000.0, 2000.0, 2500.0, 3000.0), warmup_factor=3.0) -> str:
    out = []
    if args:
        out.append('------------------------ arguments ------------------------')
        str_list = ['  {} {} {}'.format(arg, '.' * (48 - len(arg)), value) for arg, value in args.items()]
        out += sorted(str_list, key=lambda x: x.lower())
        out.append('-------------------- end of arguments ---------------------')
    for it in range(1, (stop or train_iters) + 1):
        ms = step_ms * (warmup_factor if it == 1 else 1.0)
        s = ' iteration {:8d}/{:8d} |'.format(it, train_iters)
        s += ' consumed samples: {:12d} |'.format(it * gbs)
        s += ' consumed tokens: {:12d} |'.format(it * gbs * seq)
        s += ' elapsed time per iteration (ms): {:.1f} |'.format(ms)
        s += ' learning rate: {:.3E} |'.format(3e-4)
        s += ' global batch size: {:5d} |'.format(gbs)
        s += ' {}: {:.6E} |'.format('lm loss', 10.5)
        s += ' loss scale: {:.1f} |'.format(1.0)
        s += ' grad norm: {:.3f} |'.format(3.2)
        s += ' actual seqlen: {:5d} |'.format(seq)
        s += ' number of skipped iterations: {:3d} |'.format(0)
        s += ' number of nan iterations: {:3d} |'.format(0)
        s += ' samples per second: {:.3f} |'.format(gbs / ms * 1e3)
        s += ' tokens per gpu per second (tgs): {:.3f} |'.format(1234.5)
        s += ' TFLOPs: {:.2f} |'.format(123.45)
        out.append(s)
        if it == 1:
            string = '(after {} iterations)'.format(it) + ' memory (MB)'
            string += ' | allocated: {}'.format(mem[0])
            string += ' | max allocated: {}'.format(mem[1])
            string += ' | reserved: {}'.format(mem[2])
            string += ' | max reserved: {}'.format(mem[3])
            out.append("[Rank {}] {}".format(0, string))
    return "\n".join(out) + "\n"

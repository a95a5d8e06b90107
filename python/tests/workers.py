"""What child processes run: module-level functions fn(conn, *args), see procutil."""
import pdshm


def unique_names(conn, seg_name, prefix, count):
    with pdshm.attach(seg_name) as seg:
        return [seg.unique_name(prefix) for _ in range(count)]

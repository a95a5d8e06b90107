/*
 * attach_groups.c - the trainer groups (--groups): each group's round and
 * members, from pdshm_inspect_groups.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "attach.h"

static const char *member_state(int state) {
  return state == PDSHM_MEMBER_ALIVE ? "alive" : state == PDSHM_MEMBER_DEAD ? "dead" : "free";
}

struct groups_out {
  struct ctx *c;
  int n;
};

static int group_text(const pdshm_group_info *gi, void *arg) {
  struct groups_out *o = arg;
  FILE *f = o->c->out;
  char name[4 * PDSHM_GROUP_NAME_MAX + 4], bytes[32], since[32];
  fprintf(f, "%sgroup %s  (id %llu, %u ranks: %u alive, %u dead; %s; created %s ago)\n",
          o->n++ ? "\n" : "", printable(gi->name, name, sizeof name),
          (unsigned long long)gi->id, gi->size, gi->alive, gi->dead,
          human(gi->bytes, bytes, sizeof bytes), ago(gi->created_ns, since, sizeof since));
  fprintf(f, "  round %u: %u of %u arrived; of the last %d rounds %d broken (%d by a timeout)\n",
          gi->round, gi->arrived, gi->size, PDSHM_GROUP_HISTORY,
          __builtin_popcount(gi->broken), __builtin_popcount(gi->timed_out));
  if (gi->candidates || gi->regrouped || gi->regroup_pending)
    fprintf(f, "  %u candidate%s waiting; last regroup at round %u%s\n", gi->candidates,
            gi->candidates == 1 ? "" : "s", gi->regrouped,
            gi->regroup_pending ? "; a regroup decided, not yet applied" : "");
  fprintf(f, "  %5s  %-5s  %5s  %8s  %8s  %s\n", "RANK", "STATE", "SLOT", "PID", "ARRIVED",
          "WRITING");
  for (uint32_t r = 0; r < gi->size; r++) {
    const pdshm_group_member_info *m = &gi->members[r];
    if (m->state == PDSHM_MEMBER_FREE) {
      fprintf(f, "  %5u  %-5s  %5s  %8s  %8s  %s\n", r, "free", "-", "-", "-", "-");
      continue;
    }
    fprintf(f, "  %5u  %-5s  %5u  %8u  %8u  %s\n", r, member_state(m->state), m->slot, m->pid,
            m->arrived, m->writing ? "yes" : "no");
  }
  return 0;
}

static int group_json(const pdshm_group_info *gi, void *arg) {
  struct groups_out *o = arg;
  FILE *f = o->c->out;
  fputs(o->n++ ? ",{\"name\":" : "{\"name\":", f);
  json_str(f, gi->name);
  fprintf(f,
          ",\"id\":%llu,\"size\":%u,\"alive\":%u,\"dead\":%u,\"round\":%u,\"arrived\":%u,"
          "\"broken\":%u,\"timed_out\":%u,\"bytes\":%llu,\"created_ns\":%llu,"
          "\"candidates\":%u,\"regrouped\":%u,\"regroup_pending\":%u,\"members\":[",
          (unsigned long long)gi->id, gi->size, gi->alive, gi->dead, gi->round, gi->arrived,
          gi->broken, gi->timed_out, (unsigned long long)gi->bytes,
          (unsigned long long)gi->created_ns, gi->candidates, gi->regrouped,
          gi->regroup_pending);
  for (uint32_t r = 0; r < gi->size; r++) {
    const pdshm_group_member_info *m = &gi->members[r];
    fprintf(f, "%s{\"rank\":%u,\"state\":\"%s\",\"slot\":%u,\"pid\":%u,\"arrived\":%u,"
               "\"writing\":%s}",
            r ? "," : "", r, member_state(m->state), m->slot, m->pid, m->arrived,
            m->writing ? "true" : "false");
  }
  fputs("]}", f);
  return 0;
}

int view_groups(struct ctx *c) {
  struct groups_out o = {.c = c};
  int rc;
  if (c->json) {
    fprintf(c->out, "{\"schema\":%d,\"view\":\"groups\",\"segment\":", ATTACH_SCHEMA);
    json_str(c->out, c->name);
    fputs(",\"groups\":[", c->out);
    rc = pdshm_inspect_groups(c->seg, group_json, &o);
    fputs("]}\n", c->out);
  } else {
    rc = pdshm_inspect_groups(c->seg, group_text, &o);
    if (!rc && !o.n) fprintf(c->out, "(no group)\n");
  }
  return rc ? fail_rc(c, "groups: ", rc) : 0;
}

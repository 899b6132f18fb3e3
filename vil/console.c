/* console.c: the progress modes of console.h and the terminal test. */
#include "vil/console.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vil/common.h"
#include "vil/dist.h"

int vil_progress_parse(const char *word) {
    static const char *const names[] = {"auto", "bar", "plain", "none"};
    if (!word) return VIL_PROGRESS_AUTO;
    for (int i = 0; i < 4; i++)
        if (strcmp(word, names[i]) == 0) return i;
    return -1;
}

const char *vil_progress_name(VilProgressMode mode) {
    switch (mode) {
    case VIL_PROGRESS_BAR: return "bar";
    case VIL_PROGRESS_PLAIN: return "plain";
    case VIL_PROGRESS_NONE: return "none";
    default: return "auto";
    }
}

int vil_console_is_terminal(FILE *f) {
    int fd = f ? fileno(f) : -1;
    if (fd < 0 || !isatty(fd)) return 0;
    /* ENOTTY: a tty, but not this process's controlling terminal (a launcher's pty) */
    if (tcgetpgrp(fd) < 0) return 0;
    const char *term = getenv("TERM");
    if (term && strcmp(term, "dumb") == 0) return 0;
    /* under mpirun or srun the ranks' output is forwarded and usually logged */
    return vil_dist_launched() == 0;
}

void vil_progress_init(VilProgress *p, FILE *f, VilProgressMode asked) {
    memset(p, 0, sizeof *p);
    p->f = f;
    if (asked == VIL_PROGRESS_AUTO) asked = vil_console_is_terminal(f) ? VIL_PROGRESS_BAR : VIL_PROGRESS_PLAIN;
    p->mode = asked;
}

FILE *vil_progress_line(VilProgress *p) {
    if (p->shown) {
        fputs("\r\033[K", p->f);
        p->shown = 0;
    }
    return p->f;
}

int vil_progress_due(const VilProgress *p, int force) {
    return p->mode == VIL_PROGRESS_BAR && (force || vil_now() - p->drawn_at >= 0.2);
}

void vil_progress_redraw(VilProgress *p, const char *fmt, ...) {
    if (p->mode != VIL_PROGRESS_BAR) return;
    fputs("\r\033[K", p->f);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(p->f, fmt, ap);
    va_end(ap);
    fflush(p->f);
    p->shown = 1;
    p->drawn_at = vil_now();
}

/* fifo.h: an intrusive first-in first-out queue. A server keeps its
 * connections that have not authenticated yet in one, oldest first, to
 * evict the oldest when its budget is spent (the coordinator, the
 * parameter server and the dashboard). The caller owns the links (one per
 * element, zeroed to start) and serialises calls. */
#ifndef LOOM_FIFO_H
#define LOOM_FIFO_H

#include <stdbool.h>
#include <stddef.h>

typedef struct loom__fifo_link {
  struct loom__fifo_link *prev, *next;
  void *owner; /* the element the link is in */
  bool in;     /* queued */
} loom__fifo_link;

typedef struct {
  loom__fifo_link *head, *tail; /* oldest, newest */
  size_t n;
} loom__fifo;

/* Queues l, the link of owner, as the newest. */
static inline void loom__fifo_push(loom__fifo *q, loom__fifo_link *l, void *owner) {
  l->owner = owner;
  l->prev = q->tail;
  l->next = NULL;
  if (q->tail)
    q->tail->next = l;
  else
    q->head = l;
  q->tail = l;
  l->in = true;
  q->n++;
}

/* Takes l out of the queue; nothing when it is not queued. */
static inline void loom__fifo_remove(loom__fifo *q, loom__fifo_link *l) {
  if (!l->in) return;
  if (l->prev)
    l->prev->next = l->next;
  else
    q->head = l->next;
  if (l->next)
    l->next->prev = l->prev;
  else
    q->tail = l->prev;
  l->prev = l->next = NULL;
  l->in = false;
  q->n--;
}

/* The owner of the oldest link, or NULL when the queue is empty. */
static inline void *loom__fifo_oldest(const loom__fifo *q) {
  return q->head ? q->head->owner : NULL;
}

#endif

package rollout

import (
	"context"
	"sync"
)

// readsKey is the context key of a reconcile's reads.
type readsKey struct{}

// reads holds what adapters read once during one reconcile.
type reads struct {
	mu sync.Mutex
	m  map[any]any
}

// WithReads returns a context in which ReadOnce serves each key from one
// read. The Runner observes every adapter with such a context, once per
// reconcile; a caller that observes adapters itself may do the same.
func WithReads(ctx context.Context) context.Context {
	return context.WithValue(ctx, readsKey{}, &reads{m: map[any]any{}})
}

// ReadOnce lets two adapters that read the same object (a capacity setter
// and a revision reader of one workload) share one read per reconcile:
// within a context from WithReads it calls read once per key and returns
// that value again for the same key; an error is not kept. Outside such a
// context it just calls read. The value is shared: callers must not
// modify it. Writes must read afresh, not through ReadOnce.
func ReadOnce[T any](ctx context.Context, key any, read func(context.Context) (T, error)) (T, error) {
	rs, _ := ctx.Value(readsKey{}).(*reads)
	if rs == nil {
		return read(ctx)
	}
	rs.mu.Lock()
	if v, ok := rs.m[key]; ok {
		rs.mu.Unlock()
		if t, ok := v.(T); ok {
			return t, nil
		}
		return read(ctx) // another type under the same key: not shared
	}
	rs.mu.Unlock()
	v, err := read(ctx)
	if err != nil {
		return v, err
	}
	rs.mu.Lock()
	rs.m[key] = v
	rs.mu.Unlock()
	return v, nil
}

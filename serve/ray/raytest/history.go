package raytest

import (
	"time"

	"github.com/upshift-dev/upshift/fake"
)

// history records the requests a Server answered: counts of successful ones
// by method, and the requests themselves unless turned off (KeepHistory).
type history struct {
	off   bool
	calls []fake.Call
	ok    map[string]int
}

func (h *history) add(clock *fake.Clock, op, arg string, err error) {
	if err == nil {
		if h.ok == nil {
			h.ok = map[string]int{}
		}
		h.ok[op]++
	}
	if h.off {
		return
	}
	var at time.Time
	if clock != nil {
		at = clock.Now()
	}
	h.calls = append(h.calls, fake.Call{At: at, Op: op, Arg: arg, Err: err})
}

func (h *history) count(op string) int { return h.ok[op] }

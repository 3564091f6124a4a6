package fake

import (
	"sync"

	"github.com/upshift-dev/upshift/rollout"
)

// Traffic simulates load on the two sides. Each Tick sends PerTick requests,
// split by the weights the Router's data plane has applied (or, with no
// Router, by ready capacity, as a Service spreads requests over ready pods).
// A side serves at most its ready capacity: Ready percent of PerTick.
// Requests beyond it are Overloaded when the side has some ready capacity
// and Dropped when it has none. PeakCapacity is the largest sum of the two
// sides' provisioned capacities seen at a tick.
//
// Build it with the fakes it reads; the zero value is not usable. Safe for
// concurrent use.
type Traffic struct {
	mu      sync.Mutex
	router  *Router
	a, b    func() rollout.CapacityStatus // nil: fixed capacity, always ready
	perTick int64

	ticks        int64
	served       int64
	overloaded   int64
	dropped      int64
	peakCapacity int32
}

// TrafficStats are the counts so far.
type TrafficStats struct {
	Ticks, Served, Overloaded, Dropped int64
	PeakCapacity                       int32
}

// NewTraffic simulates perTick requests per tick against router (nil: no
// router, traffic follows ready capacity) and the two sides (nil: fixed
// capacity, always 100 percent ready).
func NewTraffic(router *Router, a, b *Capacity, perTick int64) *Traffic {
	t := &Traffic{router: router, perTick: perTick}
	if a != nil {
		t.a = a.Status
	}
	if b != nil {
		t.b = b.Status
	}
	return t
}

// NewDeploymentTraffic simulates perTick requests per tick against router
// and two sides of the fixed capacity mode that run revisions (nil: always
// 100 percent ready): a side serves at most its ready share, which a
// deploy lowers while its replicas restart.
func NewDeploymentTraffic(router *Router, a, b *Deployment, perTick int64) *Traffic {
	t := &Traffic{router: router, perTick: perTick}
	if a != nil {
		t.a = a.Status
	}
	if b != nil {
		t.b = b.Status
	}
	return t
}

func sideState(status func() rollout.CapacityStatus) (capacity, ready int64) {
	if status == nil {
		return 100, 100
	}
	s := status()
	return int64(s.Capacity), int64(s.Ready)
}

// Tick sends one tick of requests.
func (t *Traffic) Tick() {
	capA, readyA := sideState(t.a)
	capB, readyB := sideState(t.b)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ticks++
	if p := int32(capA + capB); p > t.peakCapacity {
		t.peakCapacity = p
	}
	n := t.perTick
	if t.router == nil {
		served := min(n, n*(readyA+readyB)/100)
		t.served += served
		if readyA+readyB == 0 {
			t.dropped += n - served
		} else {
			t.overloaded += n - served
		}
		return
	}
	w := t.router.Applied()
	if w.A+w.B <= 0 {
		t.dropped += n // no route: nothing reaches either side
		return
	}
	toA := n * int64(w.A) / int64(w.A+w.B) // requests follow the weights' proportions
	for _, side := range [2]struct{ sent, ready int64 }{{toA, readyA}, {n - toA, readyB}} {
		served := min(side.sent, n*side.ready/100)
		t.served += served
		if side.ready == 0 {
			t.dropped += side.sent - served
		} else {
			t.overloaded += side.sent - served
		}
	}
}

// Stats returns the counts so far.
func (t *Traffic) Stats() TrafficStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return TrafficStats{Ticks: t.ticks, Served: t.served, Overloaded: t.overloaded, Dropped: t.dropped, PeakCapacity: t.peakCapacity}
}

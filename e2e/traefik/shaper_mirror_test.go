package traefik_test

import (
	"testing"
	"time"
)

// mirrorRound is one round of every user, once the canary's copies of it
// have all arrived.
type mirrorRound struct {
	from, to       time.Time
	stable, canary int64 // answers
	copies         int64 // requests the canary received beyond its answers
}

// checkMirror checks each round sent while one write held: the canary
// received ⌊p·s⌋ or ⌈p·s⌉ copies of the s requests the stable side answered;
// no canary answer at weight 0, the weight's share otherwise.
func checkMirror(t *testing.T, writes []routesWrite, hold time.Duration, rounds []mirrorRound, failFrom, failTo time.Time) {
	t.Helper()
	checked := make([]int, len(writes))
	for _, r := range rounds {
		i := inEffect(writes, r.from, r.to)
		if i < 0 {
			continue
		}
		rs := writes[i].routes
		checked[i]++
		p := int64(rs.Extras.MirrorPercent)
		lo, hi := r.stable*p/100, (r.stable*p+99)/100
		failing := r.to.After(failFrom) && r.from.Before(failTo)
		t.Logf("round %s..%s under write %d (canary %d, mirror %d%%, canary failing %v): answers stable %d canary %d; copies %d (want %d..%d)",
			r.from.Format("05.000"), r.to.Format("05.000"), i, rs.Weights.B, p, failing, r.stable, r.canary, r.copies, lo, hi)
		if r.copies < lo || r.copies > hi {
			t.Errorf("write %d: %d copies of %d stable requests at %d%%, want %d..%d", i, r.copies, r.stable, p, lo, hi)
		}
		if rs.Weights.B == 0 && r.canary != 0 {
			t.Errorf("write %d (canary 0): the users saw %d canary answers", i, r.canary)
		}
		if n := r.stable + r.canary; rs.Weights.B > 0 && n > 0 {
			if share := 100 * float64(r.canary) / float64(n); offWeight(r.canary, n, rs.Weights.B) {
				t.Errorf("write %d (canary %d): %.2f%% of the answers from the canary", i, rs.Weights.B, share)
			}
		}
	}
	for i, n := range checked {
		if n == 0 && heldLong(writes, i, hold) {
			t.Errorf("write %d (%+v): no round held under it alone", i, writes[i].routes)
		}
	}
}

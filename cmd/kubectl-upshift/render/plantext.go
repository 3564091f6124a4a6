package render

import (
	"fmt"
	"strings"

	"github.com/upshift-dev/upshift/strategy"
)

// planHeading heads PlanText's table: each entry's offset, what happens,
// the capacities after it and the canary's weight.
const planHeading = "+OFFSET WHAT (STABLE,CANARY capacity) wWEIGHT"

// hasExtraLoad reports whether some entry of tl puts more load on the
// canary than its weight: a header route or a mirror in force
// (strategy.PlanEntry.CanaryLoad).
func hasExtraLoad(tl strategy.Timeline) bool {
	for _, e := range tl.Entries {
		if e.CanaryLoad > e.Allocation.Weight {
			return true
		}
	}
	return false
}

// PlanText returns the plan tl as a table, one line per entry, headed by a
// line naming the columns, and the totals: what strategy.Timeline.String
// writes. When some entry loads the canary beyond its weight (header-routed
// and mirrored requests, see strategy.TrafficExtras.CanaryLoad), the
// heading says so and each such entry ends with "load N%", N its canary
// load; extras hops read as strategy.TrafficExtras.String writes them
// ("header route ...", "mirror 20%"...). PlanText is a pure function, safe
// for concurrent use.
func PlanText(tl strategy.Timeline) string {
	var b strings.Builder
	b.WriteString(planHeading)
	extra := hasExtraLoad(tl)
	if extra {
		b.WriteString(" [load CANARY-LOAD%]")
	}
	b.WriteByte('\n')
	for _, e := range tl.Entries {
		fmt.Fprintf(&b, "+%s %s (%d,%d) w%d", e.Offset, e.What,
			e.Allocation.StableCapacity, e.Allocation.CanaryCapacity, e.Allocation.Weight)
		if e.CanaryLoad > e.Allocation.Weight {
			fmt.Fprintf(&b, " load %d%%", e.CanaryLoad)
		}
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "total %s, %d hops, peak capacity %d", tl.Duration, tl.Hops, tl.PeakCapacity)
	return b.String()
}

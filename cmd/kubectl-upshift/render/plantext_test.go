package render

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/upshift-dev/upshift/strategy"
)

// TestPlanText: the table of a plan, with a load suffix on the entries
// whose canary load is above the weight, and only then a heading that
// names it.
func TestPlanText(t *testing.T) {
	header := &strategy.HeaderRoute{Matches: []strategy.HeaderMatch{{Name: "X-Canary", Value: "always"}}, ExpectedPercent: new(int32(10))}
	withHeader := strategy.TrafficExtras{HeaderRoute: header}
	cases := []struct {
		name string
		tl   strategy.Timeline
		want string
	}{
		{"no extras", strategy.Timeline{Duration: time.Minute, Hops: 2, PeakCapacity: 110, Entries: []strategy.PlanEntry{
			{Offset: 0, What: "weight 10", Allocation: strategy.Allocation{Weight: 10, StableCapacity: 100, CanaryCapacity: 10}, CanaryLoad: 10},
			{Offset: time.Minute, What: "Succeeded", Allocation: strategy.Allocation{Weight: 100, CanaryCapacity: 100}, CanaryLoad: 100},
		}}, `+OFFSET WHAT (STABLE,CANARY capacity) wWEIGHT
+0s weight 10 (100,10) w10
+1m0s Succeeded (0,100) w100
total 1m0s, 2 hops, peak capacity 110`},
		{"header route", strategy.Timeline{Duration: time.Minute, Hops: 3, PeakCapacity: 120, Entries: []strategy.PlanEntry{
			{Offset: 0, What: withHeader.String(), Allocation: strategy.Allocation{StableCapacity: 100, CanaryCapacity: 10}, Extras: withHeader, CanaryLoad: 10},
			{Offset: 0, What: "weight 10", Allocation: strategy.Allocation{Weight: 10, StableCapacity: 100, CanaryCapacity: 20}, Extras: withHeader, CanaryLoad: 19},
			{Offset: time.Minute, What: "no extras", Allocation: strategy.Allocation{Weight: 100, CanaryCapacity: 100}, CanaryLoad: 100},
		}}, `+OFFSET WHAT (STABLE,CANARY capacity) wWEIGHT [load CANARY-LOAD%]
+0s header route X-Canary=always (at most 10%) (100,10) w0 load 10%
+0s weight 10 (100,20) w10 load 19%
+1m0s no extras (0,100) w100
total 1m0s, 3 hops, peak capacity 120`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if diff := cmp.Diff(c.want, PlanText(c.tl)); diff != "" {
				t.Errorf("PlanText (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPlanTextAsTimeline: without extras, PlanText is the heading and
// strategy.Timeline.String, as plan printed it before extras.
func TestPlanTextAsTimeline(t *testing.T) {
	for _, c := range planCases {
		if c.name == "plan-canary-extras" {
			continue
		}
		tl, err := strategy.Plan(load(t, c.file), c.opts)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(planHeading+"\n"+tl.String(), PlanText(tl)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", c.name, diff)
		}
	}
}

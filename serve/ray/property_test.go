package ray_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"testing"

	"pgregory.net/rapid"

	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/serve/ray/raytest"
)

// refAdjusted is a naive reference of Ray's rounding for whole percents.
func refAdjusted(n, percent int64) int64 {
	if percent == 0 || n == 0 {
		return 0
	}
	return max(1, int64(math.Floor(float64(n*percent)/100+0.5)))
}

type depSpec struct {
	name     string
	num      int64 // fixed when auto is false
	auto     bool
	min, max int64
	initial  *int64
}

// TestReadyProperty drives an emulated cluster through random capacities,
// delays and autoscaling loads and checks, at every observation, that the
// ready capacity never exceeds what Ray's rounding grants, that Settled
// means every deployment runs exactly its target, and that the cluster
// settles at the last capacity asked.
func TestReadyProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ctx := context.Background()
		rs := raytest.New(raytest.Options{
			BuildPolls: rapid.IntRange(0, 2).Draw(t, "build"),
			StartPolls: rapid.IntRange(0, 3).Draw(t, "start"),
			StopPolls:  rapid.IntRange(0, 3).Draw(t, "stop"),
		})
		var deps []depSpec
		var list []map[string]any
		for i := range rapid.IntRange(1, 3).Draw(t, "deployments") {
			d := depSpec{name: fmt.Sprintf("d%d", i)}
			m := map[string]any{"name": d.name}
			if rapid.Bool().Draw(t, "auto") {
				d.auto = true
				d.min = rapid.Int64Range(0, 6).Draw(t, "min")
				d.max = rapid.Int64Range(max(d.min, 1), 12).Draw(t, "max")
				ac := map[string]any{"min_replicas": d.min, "max_replicas": d.max}
				if rapid.Bool().Draw(t, "initial?") {
					v := rapid.Int64Range(d.min, d.max).Draw(t, "initial")
					d.initial, ac["initial_replicas"] = &v, v
				}
				m["autoscaling_config"] = ac
			} else {
				d.num = rapid.Int64Range(0, 12).Draw(t, "num")
				m["num_replicas"] = d.num
			}
			deps = append(deps, d)
			list = append(list, m)
		}
		cfg, _ := json.Marshal(map[string]any{
			"applications": []any{map[string]any{"name": "app", "import_path": "m:app", "deployments": list}},
		})
		// Every read is a GET (noReuse): the emulator moves one step per
		// GET, and check compares each observation with the emulator as
		// it is then, SetDemand included.
		side := adapter(t, "http://ray.test", string(cfg), inProcess(rs), noReuse)

		last := rollout.CapacityRequest{Percent: 100, Steady: true}
		asked := false
		check := func(st rollout.CapacityStatus, what string) {
			if !asked {
				return
			}
			percent := written(deps, int64(last.Percent))
			bound := int32(100)
			for _, d := range deps {
				full := d.num
				if d.auto {
					full = d.min
				}
				if full > 0 {
					bound = min(bound, int32(refAdjusted(full, percent)*100/full))
				}
			}
			if percent == 0 {
				bound = 0
			}
			if st.Ready > bound {
				t.Fatalf("%s: ready %d above the %d Ray's rounding allows at %d%%", what, st.Ready, bound, percent)
			}
			if !st.Settled {
				return
			}
			if st.Capacity != last.Percent || st.Steady != last.Steady {
				t.Fatalf("%s: settled at %+v, asked %+v", what, st, last)
			}
			if !last.Steady && st.Ready < last.Percent {
				t.Fatalf("%s: settled with ready %d below the %d%% asked", what, st.Ready, last.Percent)
			}
			for _, d := range deps {
				got, ok := rs.Deployment("app", d.name)
				if !ok {
					t.Fatalf("%s: settled without deployment %s", what, d.name)
				}
				if got.Starting != 0 || got.Stopped != 0 || got.Running != got.Target {
					t.Fatalf("%s: settled while %s is %+v", what, d.name, got)
				}
				if !d.auto && got.Target != refAdjusted(d.num, percent) {
					t.Fatalf("%s: %s target %d, want %d", what, d.name, got.Target, refAdjusted(d.num, percent))
				}
				if d.auto && (got.Target < refAdjusted(d.min, percent) || got.Target > refAdjusted(d.max, percent)) {
					t.Fatalf("%s: autoscaling %s target %d outside its bounds at %d%%", what, d.name, got.Target, percent)
				}
			}
		}
		steps := rapid.IntRange(1, 25).Draw(t, "steps")
		for i := range steps {
			switch rapid.IntRange(0, 3).Draw(t, "action") {
			case 0:
				last = rollout.CapacityRequest{Percent: int32(rapid.IntRange(0, 100).Draw(t, "percent"))}
				if rapid.IntRange(0, 4).Draw(t, "steady") == 0 {
					last = rollout.CapacityRequest{Percent: 100, Steady: true}
				}
				if err := side.SetCapacity(ctx, last); err != nil {
					t.Fatal(err)
				}
				asked = true
			case 1:
				if k := rapid.IntRange(0, len(deps)-1).Draw(t, "dep"); deps[k].auto {
					rs.SetDemand("app", deps[k].name, rapid.Int64Range(0, 15).Draw(t, "demand"))
				}
			default:
				st, err := side.Capacity(ctx)
				if err != nil {
					t.Fatal(err)
				}
				check(st, fmt.Sprintf("step %d", i))
			}
		}
		if !asked {
			return
		}
		for i := range 12 {
			st, err := side.Capacity(ctx)
			if err != nil {
				t.Fatal(err)
			}
			check(st, fmt.Sprintf("final poll %d", i))
			if st.Settled {
				return
			}
		}
		t.Fatalf("not settled 12 polls after asking %+v", last)
	})
}

// written is the target capacity the adapter writes for percent, computed
// the plain way: the smallest value at or above percent at which every
// deployment gets ceil(n * percent / 100) replicas under Ray's rounding.
func written(deps []depSpec, percent int64) int64 {
	if percent <= 0 || percent >= 100 {
		return percent
	}
	for c := percent; c < 100; c++ {
		ok := true
		for _, d := range deps {
			full := d.num
			if d.auto {
				full = d.min
			}
			if full > 0 && refAdjusted(full, c) < (full*percent+99)/100 {
				ok = false
			}
		}
		if ok {
			return c
		}
	}
	return 100
}

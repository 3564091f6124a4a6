package ray_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/serve/ray"
	"github.com/upshift-dev/upshift/serve/ray/raytest"
)

func pct(v float64) *float64 { return &v }

// Hand-computed cases of Ray's capacity-adjusted replica count.
func TestCapacityAdjusted(t *testing.T) {
	cases := []struct {
		n    int64
		tc   *float64
		want int64
		why  string
	}{
		{3, pct(40), 1, "1.2 rounds to 1"},
		{1, pct(1), 1, "0.01 rounds to 0, but never below 1"},
		{10, pct(25), 3, "2.5 rounds half up"},
		{10, pct(0), 0, "0% is 0"},
		{7, nil, 7, "null is n"},
		{7, pct(100), 7, "100% is n"},
		{0, pct(50), 0, "n = 0 stays 0"},
		{5, pct(50), 3, "2.5 rounds half up"},
		{5, pct(30), 2, "1.5 rounds half up"},
		{10, pct(34), 3, "3.4 rounds down"},
		{10, pct(35), 4, "3.5 rounds up"},
		{3, pct(50), 2, "1.5 rounds up"},
		{10, pct(33.3), 3, "3.33 rounds down"},
		{10, pct(45.5), 5, "4.55 rounds up"},
		{2, pct(0.5), 1, "0.01 is at least 1"},
		{-4, pct(50), 0, "a negative count is 0"},
		{4, pct(150), 4, "over 100 counts as 100"},
		{4, pct(-3), 0, "under 0 counts as 0"},
	}
	for _, c := range cases {
		if got := ray.CapacityAdjusted(c.n, c.tc); got != c.want {
			tc := "null"
			if c.tc != nil {
				tc = fmt.Sprint(*c.tc)
			}
			t.Errorf("CapacityAdjusted(%d, %s) = %d, want %d (%s)", c.n, tc, got, c.want, c.why)
		}
	}
}

func ExampleCapacityAdjusted() {
	for _, tc := range []float64{0, 1, 25, 40, 100} {
		fmt.Printf("10 replicas at %v%%: %d; 3 replicas: %d\n", tc, ray.CapacityAdjusted(10, &tc), ray.CapacityAdjusted(3, &tc))
	}
	fmt.Println("null:", ray.CapacityAdjusted(10, nil))
	// Output:
	// 10 replicas at 0%: 0; 3 replicas: 0
	// 10 replicas at 1%: 1; 3 replicas: 1
	// 10 replicas at 25%: 3; 3 replicas: 1
	// 10 replicas at 40%: 4; 3 replicas: 1
	// 10 replicas at 100%: 10; 3 replicas: 3
	// null: 10
}

// ExampleRay sets a target capacity on an emulated cluster and reads back
// what is ready.
func ExampleRay() {
	cluster := raytest.New(raytest.Options{StartPolls: 1})
	srv := httptest.NewServer(cluster)
	defer srv.Close()
	side, err := ray.New(ray.Config{
		Dashboard: srv.URL,
		ServeConfig: []byte(`{"applications": [{"name": "llm", "import_path": "llm:app",
		  "deployments": [{"name": "Model", "num_replicas": 3}]}]}`),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	for _, p := range []int32{40, 70} {
		if err := side.SetCapacity(ctx, rollout.CapacityRequest{Percent: p}); err != nil {
			fmt.Println(err)
			return
		}
		st, err := side.Capacity(ctx)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("capacity %d: ready %d, settled %v\n", st.Capacity, st.Ready, st.Settled)
	}
	// Output:
	// capacity 40: ready 50, settled true
	// capacity 70: ready 84, settled true
}

// TestCapacityAdjustedAgreesWithEmulator compares CapacityAdjusted with
// the emulator's own rendering of Ray's arithmetic (package fake computes
// it apart from this package): at target capacities in steps of 0.1
// percent, every fixed deployment's target in the emulator is what
// CapacityAdjusted says.
func TestCapacityAdjustedAgreesWithEmulator(t *testing.T) {
	rs := raytest.New(raytest.Options{})
	counts := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 17, 19, 23, 25, 33, 40, 64, 99, 125}
	var deps []string
	for _, n := range counts {
		deps = append(deps, fmt.Sprintf(`{"name": "d%d", "num_replicas": %d}`, n, n))
	}
	config := `{"applications": [{"name": "app", "import_path": "m:app", "deployments": [` + strings.Join(deps, ",") + `]}], "target_capacity": %s}`
	for i := 0; i <= 1000; i++ {
		tc := float64(i) / 10
		body := fmt.Sprintf(config, strconv.FormatFloat(tc, 'f', -1, 64))
		w := httptest.NewRecorder()
		rs.ServeHTTP(w, httptest.NewRequest(http.MethodPut, "/api/serve/applications/", strings.NewReader(body)))
		if w.Code != http.StatusOK {
			t.Fatalf("PUT at %v: %d %s", tc, w.Code, w.Body)
		}
		for _, n := range counts {
			st, ok := rs.Deployment("app", fmt.Sprintf("d%d", n))
			if want := ray.CapacityAdjusted(n, &tc); !ok || st.Target != want {
				t.Errorf("%d replicas at target_capacity %v: the emulator aims for %d, CapacityAdjusted says %d", n, tc, st.Target, want)
			}
		}
	}
}

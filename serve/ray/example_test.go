package ray_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"

	"github.com/upshift-dev/upshift/rollout"
	"github.com/upshift-dev/upshift/serve/ray"
	"github.com/upshift-dev/upshift/serve/ray/raytest"
)

// A cluster that follows revisions: each revision is deployed at
// target_capacity 0, recognised from the config Ray reports as deployed,
// and then given capacity. In a Runner, the Deployers of the two clusters
// are RevisionA and RevisionB, and the Runner makes these calls itself.
func ExampleRay_Deployer() {
	ctx := context.Background()
	srv := httptest.NewServer(raytest.New(raytest.Options{})) // an emulated Ray dashboard
	defer srv.Close()

	v1 := `{"applications": [{"name": "shop", "import_path": "shop:app",
	  "runtime_env": {"env_vars": {"VERSION": "1"}}, "deployments": [{"name": "Shop", "num_replicas": 2}]}]}`
	v2 := strings.Replace(v1, `"VERSION": "1"`, `"VERSION": "2"`, 1)
	side, err := ray.New(ray.Config{
		Dashboard: srv.URL,
		Revisions: ray.RevisionMap(map[string]json.RawMessage{"v1": json.RawMessage(v1), "v2": json.RawMessage(v2)}),
	})
	if err != nil {
		panic(err)
	}
	deployer, err := side.Deployer() // rollout.Runner{A: side, RevisionA: deployer, ...}
	if err != nil {
		panic(err)
	}

	if err := deployer.Deploy(ctx, "v1"); err != nil { // PUT v1 at target_capacity 0
		panic(err)
	}
	st, _ := deployer.Revision(ctx, "v1")
	fmt.Printf("runs %q, updated %v\n", st.Revision, st.Updated)
	if err := side.SetCapacity(ctx, rollout.CapacityRequest{Percent: 100, Steady: true}); err != nil { // v1's config, target_capacity null
		panic(err)
	}

	err = deployer.Deploy(ctx, "v2")
	fmt.Println("deploy v2 while serving:", errors.Is(err, ray.ErrServing), rollout.IsPermanent(err))

	if err := side.SetCapacity(ctx, rollout.CapacityRequest{Percent: 0}); err != nil {
		panic(err)
	}
	if err := deployer.Deploy(ctx, "v2"); err != nil {
		panic(err)
	}
	st, _ = deployer.Revision(ctx, "v2")
	fmt.Printf("runs %q, updated %v\n", st.Revision, st.Updated)
	// Output:
	// runs "v1", updated true
	// deploy v2 while serving: true true
	// runs "v2", updated true
}

// Someone else puts a config of no known revision on a cluster (here
// through the emulator's PutByOther). The adapter does not raise its
// capacity, but takes capacity away by writing back the config the
// cluster runs, as Ray reports it, so a walk back reaches 0; then the
// revision is deployed at 0 as usual.
func ExampleRay_SetCapacity_unknownConfig() {
	ctx := context.Background()
	rs := raytest.New(raytest.Options{})
	srv := httptest.NewServer(rs)
	defer srv.Close()

	v1 := `{"applications": [{"name": "shop", "import_path": "shop:app", "deployments": [{"name": "Shop", "num_replicas": 2}]}]}`
	side, err := ray.New(ray.Config{Dashboard: srv.URL, Revisions: ray.RevisionMap(map[string]json.RawMessage{"v1": json.RawMessage(v1)})})
	if err != nil {
		panic(err)
	}
	deployer, err := side.Deployer()
	if err != nil {
		panic(err)
	}
	// Another writer's config, at target_capacity 40.
	other := `{"applications": [{"name": "blog", "import_path": "blog:app"}], "target_capacity": 40}`
	if err := rs.PutByOther(json.RawMessage(other)); err != nil {
		panic(err)
	}
	st, _ := deployer.Revision(ctx, "v1")
	fmt.Printf("runs %q\n", st.Revision)

	err = side.SetCapacity(ctx, rollout.CapacityRequest{Percent: 60})
	fmt.Println("raise to 60:", errors.Is(err, ray.ErrUnknownRevision))
	if err := side.SetCapacity(ctx, rollout.CapacityRequest{Percent: 0}); err != nil {
		panic(err)
	}
	var put struct {
		Applications   []struct{ Name string }
		TargetCapacity *float64 `json:"target_capacity"`
	}
	if err := json.Unmarshal(rs.LastPut(), &put); err != nil {
		panic(err)
	}
	fmt.Printf("lowered: PUT %s at target_capacity %v\n", put.Applications[0].Name, *put.TargetCapacity)

	if err := deployer.Deploy(ctx, "v1"); err != nil {
		panic(err)
	}
	st, _ = deployer.Revision(ctx, "v1")
	fmt.Printf("runs %q, updated %v\n", st.Revision, st.Updated)
	// Output:
	// runs ""
	// raise to 60: true
	// lowered: PUT blog at target_capacity 0
	// runs "v1", updated true
}

// Package v1alpha1 is the API of the example operator: the Release kind,
// in the group operator.upshift.dev, version v1alpha1. It imports only
// k8s.io/apimachinery and upshift's strategy package, so clients of the
// API import little.
//
// +kubebuilder:object:generate=true
// +groupName=operator.upshift.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group is the API group of the Release kind (as the +groupName marker
// above says for controller-gen), and Kind the kind. The operator derives
// its names from them (see controller.Name), so a copy with its own group
// and kind gets names of its own.
const (
	Group = "operator.upshift.dev"
	Kind  = "Release"
)

var (
	// GroupVersion is the group and version of the Release kind.
	GroupVersion = schema.GroupVersion{Group: Group, Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this package.
	SchemeBuilder = runtime.NewSchemeBuilder(func(s *runtime.Scheme) error {
		s.AddKnownTypes(GroupVersion, &Release{}, &ReleaseList{})
		metav1.AddToGroupVersion(s, GroupVersion)
		return nil
	})

	// AddToScheme adds the kinds of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

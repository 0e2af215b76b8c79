package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestOmitPlugins checks that each build tag really drops its plugin from
// the binary (DESIGN.md: compile-time selection), and that the binary
// still builds without it.
func TestOmitPlugins(t *testing.T) {
	const mod = "github.com/tandem-kafka/tandem/"
	for _, name := range []string{"groups", "txn", "acl", "mirror"} {
		t.Run(name, func(t *testing.T) {
			out, err := exec.Command("go", "list", "-deps", "-tags", "tandem_omit_"+name, mod+"cmd/tandem").CombinedOutput()
			if err != nil {
				t.Fatalf("go list: %v\n%s", err, out)
			}
			for _, dep := range strings.Fields(string(out)) {
				if dep == mod+"plugins/"+name || strings.HasPrefix(dep, mod+"plugins/"+name+"/") {
					t.Fatalf("-tags tandem_omit_%s still links %s", name, dep)
				}
			}
			if !strings.Contains(string(out), mod+"server") {
				t.Fatalf("go list output does not look like cmd/tandem's dependencies:\n%s", out)
			}
			if out, err := exec.Command("go", "vet", "-tags", "tandem_omit_"+name, mod+"cmd/tandem").CombinedOutput(); err != nil {
				t.Fatalf("cmd/tandem does not build without %s: %v\n%s", name, err, out)
			}
		})
	}
	out, err := exec.Command("go", "list", "-deps", mod+"cmd/tandem").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, name := range []string{"groups", "txn", "acl", "mirror"} {
		if !strings.Contains(string(out), mod+"plugins/"+name+"\n") {
			t.Errorf("the default build does not link plugins/%s", name)
		}
	}
}

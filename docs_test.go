package tandem_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocsCiteWhatExists: every file, directory and Go identifier that
// README.md and docs/ cite in backquotes exists in the repository, so that
// the docs cannot keep naming what was renamed or never written. A cited
// path is one that starts with a directory of the repository
// (`server/conn.go`, `plugins/mirror/metasync/*.go`); a cited identifier
// is package.Name[.Field] with a package of the repository
// (`server/plugin.TxnMarkerWriter`, `raftmeta.Config.RaftAddr`,
// `plugins/mirror/admin.Opt()`).
func TestDocsCiteWhatExists(t *testing.T) {
	docs, _ := filepath.Glob("docs/*.md")
	docs = append(docs, "README.md")
	cite := regexp.MustCompile("`([^`\\s]+)`")
	ident := regexp.MustCompile(`^([a-z][a-z/]*)\.([A-Z]\w*)(?:\.(\w+))?(?:\(\))?$`)
	for _, doc := range docs {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range cite.FindAllStringSubmatch(string(text), -1) {
			c := strings.TrimSuffix(m[1], "/")
			if m := ident.FindStringSubmatch(c); m != nil {
				if pkg := pkgDir(m[1]); pkg != "" {
					if !declares(t, pkg, m[2], m[3]) {
						t.Errorf("%s cites %s, which package %s does not declare", doc, c, pkg)
					}
				}
				continue
			}
			top, _, found := strings.Cut(c, "/")
			if !found || !isDir(top) || strings.ContainsAny(c, "<>") {
				continue
			}
			if matches, _ := filepath.Glob(c); len(matches) == 0 {
				t.Errorf("%s cites %s, which does not exist", doc, c)
			}
		}
	}
}

func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir() && path != "." && path != ".."
}

// pkgDir is the directory of a package cited as name ("server",
// "plugins/mirror/admin", "tandem" for the root), "" if it is not ours.
func pkgDir(name string) string {
	if name == "tandem" {
		return "."
	}
	if isDir(name) {
		return name
	}
	return ""
}

// declares reports whether the package in dir declares name at top level
// (or as a method), and, if field is given, whether field names a field or
// method of it.
func declares(t *testing.T, dir, name, field string) bool {
	pkgs, err := parser.ParseDir(token.NewFileSet(), dir, func(fi os.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	if err != nil {
		t.Fatalf("parsing %s: %v", dir, err)
	}
	found, hasField := false, field == ""
	for _, p := range pkgs {
		for _, f := range p.Files {
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.FuncDecl:
					if n.Recv == nil && n.Name.Name == name {
						found = true
					}
					if n.Recv != nil && n.Name.Name == field && recvName(n.Recv) == name {
						hasField = true
					}
				case *ast.TypeSpec:
					if n.Name.Name == name {
						found = true
						if st, ok := n.Type.(*ast.StructType); ok {
							for _, fl := range st.Fields.List {
								for _, id := range fl.Names {
									hasField = hasField || id.Name == field
								}
							}
						}
						if it, ok := n.Type.(*ast.InterfaceType); ok {
							for _, m := range it.Methods.List {
								for _, id := range m.Names {
									hasField = hasField || id.Name == field
								}
							}
						}
					}
				case *ast.ValueSpec:
					for _, id := range n.Names {
						found = found || id.Name == name
					}
				}
				return true
			})
		}
	}
	return found && hasField
}

func recvName(r *ast.FieldList) string {
	if len(r.List) == 0 {
		return ""
	}
	x := r.List[0].Type
	if s, ok := x.(*ast.StarExpr); ok {
		x = s.X
	}
	if id, ok := x.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

// TestREADMENamesOneTestCommand (issue 41, item 13): README's first
// block names one command that sets up a fresh machine and passes the
// tests (`bash .ci/run`), and that script installs every tool the
// suites look for (kcat, promtool, chromium) and runs the test command
// README names (`make test`), as CI does.
func TestREADMENamesOneTestCommand(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, _ := strings.Cut(string(readme), "```sh\n")
	block, _, _ = strings.Cut(block, "```")
	if !regexp.MustCompile(`(?m)^bash \.ci/run\s+#.*fresh`).MatchString(block) || !regexp.MustCompile(`(?m)^make test\s`).MatchString(block) {
		t.Fatalf("README's first block does not name `bash .ci/run` for a fresh machine and `make test`:\n%s", block)
	}
	ci, err := os.ReadFile(".ci/run")
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range []string{"kcat", "chromium", "prometheus"} {
		if !strings.Contains(string(ci), "need+=("+pkg+")") {
			t.Errorf(".ci/run does not install %s", pkg)
		}
	}
	lines := strings.Split(strings.TrimSpace(string(ci)), "\n")
	if last := lines[len(lines)-1]; last != "make test" {
		t.Errorf(".ci/run ends with %q, not the test command README names (make test)", last)
	}
}

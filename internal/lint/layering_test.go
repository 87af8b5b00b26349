package lint

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/kdb-project/kdb"

// allowed maps a package directory (relative to the module root, "." for the
// root) to the kdb packages it may import. internal/* packages are handled by
// rule in allowedImport.
var allowed = map[string][]string{
	".":        {"recovery", "index", "journal", "pagefile", "vfs"},
	"recovery": {"index", "journal", "pagefile", "vfs"},
	"index":    {"pagefile", "vfs"},
	"pagefile": {"vfs"},
	"journal":  {"vfs"},
	"vfs":      {},
}

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		t.Fatalf("module root not found from %s: %v", dir, err)
	}
	return dir
}

// allowedImport reports whether package dir (slash-separated, relative) may
// import kdb package imp (relative). Test files may also import what their
// package's tests need: internal/kdbtest for lower packages.
func allowedImport(dir, imp string, isTest bool) bool {
	top := strings.SplitN(dir, "/", 2)[0]
	switch {
	case top == "cmd" || top == "bench":
		return !strings.HasPrefix(imp, "cmd") && !strings.HasPrefix(imp, "bench")
	case top == "broker":
		// The message store is built on the root package's public API alone:
		// not on the engine's packages below it. Its tests may also use the
		// test helpers (internal/kdbtest, the crashable file system in vfs).
		if imp == "." || imp == "broker" || strings.HasPrefix(imp, "broker/") || imp == "vfs" || strings.HasPrefix(imp, "vfs/") {
			return imp != "broker" || isTest
		}
		if strings.HasPrefix(imp, "internal/kdbtest") {
			return isTest
		}
		return imp == "internal/codec" || imp == "internal/invariants" || (isTest && imp == "internal/checksum")
	case dir == "internal/kdbtest/dbtest" || strings.HasPrefix(dir, "internal/kdbtest/dbtest/"):
		return imp == "." || imp == "vfs" || strings.HasPrefix(imp, "internal/")
	case top == "internal":
		return (imp == "vfs" || strings.HasPrefix(imp, "vfs/") || strings.HasPrefix(imp, "internal/")) && !strings.HasPrefix(imp, "internal/kdbtest/dbtest")
	}
	if strings.HasPrefix(imp, "internal/") {
		if strings.HasPrefix(imp, "internal/kdbtest/dbtest") {
			return dir == "." && isTest
		}
		return true
	}
	if imp == "." {
		// Only the root's own external tests (package kdb_test) import it.
		return dir == "." && isTest
	}
	for _, a := range allowed[top] {
		if imp == a || strings.HasPrefix(imp, a+"/") {
			return true
		}
	}
	// a package may import its own sub-packages, and they their parent
	return imp != "." && (strings.HasPrefix(imp, top+"/") || (imp == top && dir != top))
}

func TestLayering(t *testing.T) {
	root := repoRoot(t)
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			// bench/peers and other nested modules have their own go.mod.
			if path != root {
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		rel = filepath.ToSlash(rel)
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		isTest := strings.HasSuffix(path, "_test.go")
		for _, is := range f.Imports {
			p := strings.Trim(is.Path.Value, `"`)
			if p != module && !strings.HasPrefix(p, module+"/") {
				continue
			}
			imp := strings.TrimPrefix(strings.TrimPrefix(p, module), "/")
			if imp == "" {
				imp = "."
			}
			if !allowedImport(rel, imp, isTest) {
				t.Errorf("%s imports %s: breaks the layering (docs/DESIGN.md, the package diagram at the top)", filepath.ToSlash(mustRel(root, path)), p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func mustRel(root, path string) string {
	r, err := filepath.Rel(root, path)
	if err != nil {
		return path
	}
	return r
}

func TestRootModuleDependencies(t *testing.T) {
	root := repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	ok := map[string]bool{
		"golang.org/x/sys":             true,
		"github.com/google/btree":      true,
		"github.com/cespare/xxhash/v2": true,
	}
	inRequire := false
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "require ("):
			inRequire = true
			continue
		case inRequire && line == ")":
			inRequire = false
			continue
		case strings.HasPrefix(line, "require "):
			line = strings.TrimPrefix(line, "require ")
		case !inRequire:
			continue
		}
		fields := strings.Fields(line)
		if len(fields) == 0 || strings.HasPrefix(fields[0], "//") {
			continue
		}
		if !ok[fields[0]] {
			t.Errorf("root go.mod requires %s; only x/sys, btree and xxhash are allowed (put it in a module under bench/)", fields[0])
		}
	}
}

package vfs

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCleanPath_DotDotAfterALink: ".." after a symbolic link is resolved
// where the link points, as the kernel does, not removed as text.
func TestCleanPath_DotDotAfterALink(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"b", "outer/b", "real/sub"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../b", filepath.Join(root, "outer", "up")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "real", "sub"), filepath.Join(root, "lnk")); err != nil {
		t.Fatal(err)
	}
	same := func(a, b string) bool {
		sa, err1 := os.Stat(a)
		sb, err2 := os.Stat(b)
		return err1 == nil && err2 == nil && os.SameFile(sa, sb)
	}
	for _, c := range []struct{ in, want string }{
		// (not filepath.Join: it would clean the ".." away as text)
		{root + "/outer/up/../b", filepath.Join(root, "b")},
		{root + "/lnk/../sub", filepath.Join(root, "real", "sub")},
		{root + "/outer/b/.", filepath.Join(root, "outer", "b")},
		{filepath.Join(root, "outer") + "/./b//", filepath.Join(root, "outer", "b")},
		{filepath.Join(root, "lnk"), filepath.Join(root, "lnk")},             // no "..": the link kept
		{filepath.Join(root, "missing") + "/../b", filepath.Join(root, "b")}, // does not resolve: as text
	} {
		got := CleanPath(c.in)
		if got != c.want {
			t.Errorf("CleanPath(%q) = %q, want %q", c.in, got, c.want)
		}
		if c.in != filepath.Join(root, "missing")+"/../b" && !same(got, c.in) {
			t.Errorf("CleanPath(%q) = %q: not the directory the kernel resolves", c.in, got)
		}
	}
	if got := CleanPath(""); got != "" {
		t.Errorf("CleanPath(\"\") = %q, want it empty (callers refuse it)", got)
	}
	// Relative names stay relative.
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chdir(root); err != nil {
		t.Fatal(err)
	}
	defer os.Chdir(wd)
	if got := CleanPath("outer/up/../b"); got != "b" {
		t.Errorf("CleanPath(outer/up/../b) = %q, want b", got)
	}
	if got := CleanPath("outer/b/../b"); got != "outer/b" {
		t.Errorf("CleanPath(outer/b/../b) = %q, want outer/b", got)
	}
}

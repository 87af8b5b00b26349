package vfs

import (
	"path/filepath"
	"strings"
)

// CleanPath returns p cleaned the way the operating system resolves it.
// filepath.Clean removes "x/.." as text, but the kernel resolves ".." in
// the directory x names: if x is a symbolic link (x -> ../b), "x/../s" is
// "../s" for every system call and "s" for Clean, so a tool that cleaned
// some names and not others would mix the files of two directories. Here
// the part of p up to its last ".." is resolved through its symbolic links
// (filepath.EvalSymlinks), the rest appended and cleaned. A p without ".."
// is only cleaned (its symbolic links are kept: the kernel follows them
// the same way whatever the name). If that part does not resolve (a
// missing directory, a loop), p is cleaned as text: every system call on
// it fails the same way. An empty p stays empty (filepath.Clean would make
// it ".", the current directory): callers refuse it.
func CleanPath(p string) string {
	if p == "" {
		return ""
	}
	elems := strings.Split(filepath.ToSlash(p), "/")
	last := -1
	for i, e := range elems {
		if e == ".." {
			last = i
		}
	}
	if last < 0 {
		return filepath.Clean(p)
	}
	head := filepath.FromSlash(strings.Join(elems[:last+1], "/"))
	if head == "" {
		head = string(filepath.Separator)
	}
	r, err := filepath.EvalSymlinks(head)
	if err != nil {
		return filepath.Clean(p)
	}
	return filepath.Join(append([]string{r}, elems[last+1:]...)...)
}

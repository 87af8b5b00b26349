package main

import (
	"fmt"
	"io"
	"runtime/debug"
	"slices"
)

// runGuarded runs c with memory faults turned into an error: the page
// file is read through a shared mmap, and a read of a page the file no
// longer holds (db.data cut short while a command reads it, by hand or by
// another tool) or one the disk cannot return (an I/O error on a mapped
// page) is a SIGBUS, which the Go runtime reports as a fatal error with a
// stack dump and exit status 2, the usage code. Here such a fault ends
// the command with exit 3 (I/O error) and a line that says what happened
// (with --json, the error document). Any other panic goes on as it was.
// The command's goroutine is the one that reads pages (the engine reads in
// its callers' goroutines), so the guard covers it.
func runGuarded(name string, c command, args []string, stdout, stderr io.Writer) (code int) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		f, ok := r.(interface{ Addr() uintptr })
		if !ok {
			panic(r)
		}
		err := fmt.Errorf("a read of a memory-mapped store file failed (fault at %#x): db.data was cut short while it was read, or the disk returned an I/O error; run kdbtool check again, and if it fails the same way, inspect DIR", f.Addr())
		if name != "stress" && (slices.Contains(args, "--json") || slices.Contains(args, "-json")) {
			writeJSON(stdout, errorDoc("", err))
		} else {
			fmt.Fprintf(stderr, "kdbtool %s: %s\n", name, err)
		}
		code = exitIO
	}()
	return c.run(args, stdout, stderr)
}

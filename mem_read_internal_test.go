package kdb

import "testing"

// TestMem_ReadPairsStateWithItsS guards read's second look at the state
// (mem.go, "m.state.Load() == st"): a freeze of the active table and a
// group published in the new one between read's load of the state and its
// load of S must not give the old state with the new S. Such a View would
// read at S without the versions of that group, which are in neither of
// the old state's tables: it would miss writes acknowledged before it
// began. (A survivor of an outside tester's mutation hunt, 2026-12-08: the
// concurrent snapshot test does not hit a window this small.)
func TestMem_ReadPairsStateWithItsS(t *testing.T) {
	var m mem
	m.init()
	m.seq.Store(5)
	old := m.state.Load()
	next := &memState{active: newMemTable(), frozen: old.active, base: 5}
	fired := false
	hook := func() {
		if !fired {
			fired = true
			m.state.Store(next) // the freeze
			m.seq.Store(6)      // a group applied to next.active, published
		}
	}
	testHookMemRead.Store(&hook)
	defer testHookMemRead.Store(nil)
	v := m.read()
	if !fired {
		t.Fatal("the hook did not run")
	}
	switch {
	case v.st == old && v.s != 5:
		t.Fatalf("read gave the state from before the freeze with S %d: the versions at seq 6 are in neither of its tables", v.s)
	case v.st == next && v.s != 6:
		t.Fatalf("read gave the new state with S %d, want 6", v.s)
	case v.st != old && v.st != next:
		t.Fatal("read gave a state that was never stored")
	}
}

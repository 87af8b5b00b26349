package main

import "testing"

// TestRepair_DryRunUnderLiveCheckpointsNoFalseReports: repair without
// --apply takes no lock and writes nothing, so an operator may run it on a
// store a process has open. Its reads race with the writer's checkpoints
// and journal GC as check's do, and it must not report damage that is not
// there: it said "cannot repair: the journal is damaged before the replay
// position: journal: open db-84.log: ... no such file or directory" (a
// segment GC removed while it read) of a healthy store a kdbtool stress
// was writing, exit 1.
func TestRepair_DryRunUnderLiveCheckpointsNoFalseReports(t *testing.T) {
	dir := t.TempDir()
	w := startLiveWriter(t, dir)
	defer w.close(t)
	runs := liveRuns(200)
	false_ := 0
	for i := 0; i < runs; i++ {
		code, out, errs := runTool(t, "repair", dir)
		if code != exitOK {
			false_++
			if false_ <= 3 {
				t.Errorf("repair (dry run) %d: exit %d\n%s%s", i, code, out, errs)
			}
		}
	}
	t.Logf("%d dry runs, %d false reports, while the writer did %d batches and %d explicit checkpoints",
		runs, false_, w.writes.Load(), w.checkpoints.Load())
	if false_ > 0 {
		t.Errorf("%d of %d repair dry runs reported damage that is not there", false_, runs)
	}
}

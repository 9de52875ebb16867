// Many cases per process, for the grader: a LibTorch test program takes about 0.6 s to start
// (the operator registry's static initializers), more than most cases take to run, so the
// grader hands a list of cases to one subject process and one judge process per suite chunk.
//
//   the subject  (KIT_SUBJECT_CASES=<file of names> with KIT_SUBJECT_RECORDS=<fd>) loads once and
//                forks a child per case, in a fresh directory, as a fresh process would start
//                the case: the child is the case's subject; the parent (untrusted like the
//                child: it is the student's program) reads the child's records on a pipe of
//                its own, stops it at the case's time limit, and writes one case frame to the
//                grader's descriptor: "CAS" + u64 length + body, the body four fields, each
//                u64 length + bytes: the case's name, how its child ended in words, "1" when
//                it was stopped at the time limit (else "0"), and its records stream.
//   the judge    (KIT_JUDGE_RECORDS=<directory>) judges every case its --gtest_filter names,
//                reading case <name>'s records from <directory>/<hex of name>.records and how
//                its subject ended from <hex of name>.status, when the case starts.
// The grader (grader/grade.py) parses the frames; a case with no frame (the batch crashed, was
// stopped or wrote something else) runs again on its own, as subject + judge. The frames are
// plain data like the records: nothing in them can decide a verdict.
#pragma once
#include <functional>
#include <string>

namespace kit::judge {

// The subject's batch: runs `run_one(name)` in a forked child per name of the file `cases`
// (one per line), at most `timeout_s` seconds each, writing a case frame per case to `fd`.
// Returns the process's exit status.
int run_subject_cases(const std::string& cases, int fd, double timeout_s,
                      const std::function<int(const std::string&)>& run_one);

// The file name of a case's records in the judge's directory: the case's name in hex.
std::string case_file_stem(const std::string& name);

// The judge of one case: its subject's records from the file `path` (at most kMaxStreamBytes
// read; no file: none) and how its subject ended, in words (for messages).
void judge_records(const std::string& path, const std::string& status);

// The judge's batch: makes this process judge case `name` on the records in `dir`.
void judge_case_from(const std::string& dir, const std::string& name);

}  // namespace kit::judge

# shellcheck shell=bash
# Sourced by the job scripts (main_job.sh, pipeline_job.sh), from the kit's root with BUILD set:
# their progress lines and their first two steps, the packages and the build.

# step TEXT...: a progress line, with the time.
step() { printf '\n== [%s] %s\n' "$(date +%H:%M:%S)" "$*"; }

# install_and_build N TARGET...: steps 1/N (install what is missing) and 2/N (configure BUILD,
# build the TARGETs). The reference solution where there is one (instructors); a student's
# bundle builds their own code.
install_and_build() {
  local steps=$1 solution
  shift
  step "1/$steps packages"
  scripts/install_deps.sh
  solution=$([ -d solution ] && echo ON || echo OFF)
  step "2/$steps build (KIT_SOLUTION=$solution)"
  cmake -S . -B "$BUILD" -DKIT_SOLUTION="$solution" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD" -j "$(scripts/jobs.sh)" --target "$@"
}

# move_aside PATH...: an earlier job's runs go to runs/earlier-<time>/, not away: the figures
# read only the fresh paths, and nothing measured is lost without a word.
move_aside() {
  local aside="" p
  for p in "$@"; do
    [[ -e $p ]] || continue
    [[ -n $aside ]] || { aside=runs/earlier-$(date +%Y%m%d-%H%M%S); mkdir -p "$aside"; }
    mv "$p" "$aside/"
    echo "moved the earlier $p to $aside/"
  done
}

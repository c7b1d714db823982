"""The profiler files a run already wrote (torch's Chrome traces, Nsight Systems' NVTX
JSON lines, Ascend's MSTX trace views), read into one trace model (:mod:`.model`) and
imported as the run's rank lanes, so the step anatomy, the culprit rank and the
dashboards answer for them (`rl-insight import --profiler`)."""

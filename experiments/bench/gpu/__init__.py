"""Every CUDA path of rlpar, checked in one go (:mod:`.check`, its cases in
:mod:`.cases`)."""

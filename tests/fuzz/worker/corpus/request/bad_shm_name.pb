
req-2ƒ@"9**"
mmgw-fuzz-wk`"fuzz-wk-shm-key!"(0
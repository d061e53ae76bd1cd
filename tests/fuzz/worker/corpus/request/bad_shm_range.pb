
req-2ƒ@"=.*&
/mmgw-fuzz-wkø`"fuzz-wk-shm-key!"(0
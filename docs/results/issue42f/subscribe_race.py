# The paho suite's test_request_response pattern with paho-mqtt: A subscribes and waits for its
# SUBACK, B subscribes and (without a third argument) does not wait, A publishes QoS 1 at once.
# Usage: python3 subscribe_race.py PORT RUNS [wait]   (prints how many runs B missed the message)
import sys, time, threading
import paho.mqtt.client as mqtt
from paho.mqtt.properties import Properties
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.subscribeoptions import SubscribeOptions
port=int(sys.argv[1]); runs=int(sys.argv[2]); wait_b=len(sys.argv)>3
miss=0
for r in range(runs):
    got=[]; subacks={}
    def mk(cid):
        c=mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=cid, protocol=mqtt.MQTTv5)
        c.on_subscribe=lambda cl,u,mid,rc,p: subacks.__setitem__(cid, time.time())
        return c
    a=mk("rrA%d"%r); b=mk("rrB%d"%r)
    b.on_message=lambda c,u,m: got.append(m.payload)
    for c in (a,b):
        c.connect("127.0.0.1", port, clean_start=True); c.loop_start()
    time.sleep(0.2)
    topic="rr/t%d"%r
    a.subscribe(topic, options=SubscribeOptions(qos=2, noLocal=True))
    while "rrA%d"%r not in subacks: time.sleep(0.001)
    b.subscribe(topic, options=SubscribeOptions(qos=2, noLocal=True))
    if wait_b:
        while "rrB%d"%r not in subacks: time.sleep(0.001)
    p=Properties(PacketTypes.PUBLISH); p.ResponseTopic=topic; p.CorrelationData=b"334"
    t0=time.time()
    a.publish(topic, b"request", 1, properties=p)
    end=time.time()+3
    while not got and time.time()<end: time.sleep(0.005)
    sb=subacks.get("rrB%d"%r)
    print(r, "got" if got else "MISSED", "B suback after publish by %.1f ms"%((sb-t0)*1000) if sb else "no suback")
    if not got: miss+=1
    for c in (a,b): c.disconnect(); c.loop_stop()
print("missed", miss, "of", runs)

"""The ``hospital`` sample: a clinic's outpatient, pharmacy and ward records, generated offline.

The schema is written the way Chinese hospital information systems (HIS) write theirs: table and
column names are pinyin abbreviations (``mz_cf`` = 门诊处方, ``kfrq`` = 开方日期) and the values
are Chinese. What each table holds (primary key first):

* ``ks`` 科室: the clinic's 14 departments (心内科, 儿科, 急诊科...), where they are, their phone.
* ``ys`` 医生: 60 doctors, each with a title (主任医师 ... 住院医师), a department and a hire date.
* ``hz`` 患者: 400 patients: name, sex, birth date, mobile number, medical insurance type.
* ``mz_gh`` 门诊挂号: 1,200 outpatient registrations of a patient with a department (date, fee,
  ordinary or expert slot). A registration can be booked a few days before the visit.
* ``mz_jz`` 门诊就诊: the visits that followed a registration (about nine in ten): the doctor seen,
  who works in the registration's department, and the diagnosis.
* ``mz_cf`` 门诊处方: prescriptions written at a visit; the amount is the sum of their items.
* ``mz_cfmx`` 处方明细: prescription items: one drug, the number of packs and how to take it.
* ``mz_yp`` 药品目录: the drug catalogue: name, pack size, unit, unit price, manufacturer.
* ``yf_kc`` 药房库存: stock of each drug in the four pharmacies, by batch expiry date.
* ``zy_br`` 住院病人: inpatient stays: patient, ward department, attending doctor of that
  department, admission and discharge dates (discharge empty while still in hospital), bed,
  admission diagnosis.

The foreign-key graph has cycles (``ks - ys - mz_jz - mz_gh - ks``, ``ks - ys - zy_br - ks``,
``hz - mz_gh - ks - zy_br - hz``) and parallel routes: a patient reaches a department through
a registration or through an inpatient stay; a doctor through ``ys.ks_id``, the visits seen or
the stays attended.

The values agree with each other: diagnoses belong to the department and fit the patient's age
and sex (儿科 sees children under 14, 妇产科 women), drugs fit the diagnosis, a prescription's
amount is the sum of quantity x unit price of its items, dates run registration <= visit =
prescription, a doctor sees patients only after being hired, experts (主任/副主任医师) take the
expert slots, and no bed holds two patients at once. Everything is drawn from one
``random.Random(seed)``, dates are fixed (2023-01-01 to the snapshot day 2024-06-30) and rows are
inserted in key order, so a build gives the same bytes every time.
"""

from __future__ import annotations

import random
import sqlite3
from dataclasses import dataclass
from datetime import date, timedelta

from data_pipeline.sqlite_build import serialize_database

SEED = 20240630
"""Seed of the one random generator the build draws from."""

FIRST_DAY = date(2023, 1, 1)
"""First day of registrations and admissions."""

SNAPSHOT = date(2024, 6, 30)
"""The day the data describes: the last registration day; inpatients not yet discharged have no ``cyrq``."""

N_PATIENTS = 400
N_REGISTRATIONS = 1200
N_INPATIENTS = 150

DDL = """
CREATE TABLE ks (
    ks_id INTEGER PRIMARY KEY,
    ksmc VARCHAR(20) NOT NULL,
    ks_wz VARCHAR(40),
    ks_dh VARCHAR(20)
);
CREATE TABLE ys (
    ys_id INTEGER PRIMARY KEY,
    ysxm VARCHAR(20) NOT NULL,
    zc VARCHAR(10),
    ks_id INTEGER NOT NULL REFERENCES ks(ks_id),
    rzrq DATE
);
CREATE TABLE hz (
    hz_id INTEGER PRIMARY KEY,
    hzxm VARCHAR(20) NOT NULL,
    xb VARCHAR(2),
    csrq DATE,
    sjh VARCHAR(11),
    yblx VARCHAR(10)
);
CREATE TABLE mz_gh (
    gh_id INTEGER PRIMARY KEY,
    hz_id INTEGER NOT NULL REFERENCES hz(hz_id),
    ks_id INTEGER NOT NULL REFERENCES ks(ks_id),
    ghrq DATE,
    ghf DECIMAL(8, 2),
    hb VARCHAR(10)
);
CREATE TABLE mz_jz (
    jz_id INTEGER PRIMARY KEY,
    gh_id INTEGER NOT NULL REFERENCES mz_gh(gh_id),
    ys_id INTEGER NOT NULL REFERENCES ys(ys_id),
    jzrq DATE,
    zd VARCHAR(50)
);
CREATE TABLE mz_cf (
    cf_id INTEGER PRIMARY KEY,
    jz_id INTEGER NOT NULL REFERENCES mz_jz(jz_id),
    kfrq DATE,
    cfje DECIMAL(10, 2),
    cfzt VARCHAR(10)
);
CREATE TABLE mz_yp (
    yp_id INTEGER PRIMARY KEY,
    ypmc VARCHAR(50) NOT NULL,
    gg VARCHAR(40),
    dw VARCHAR(4),
    dj DECIMAL(10, 2),
    sccj VARCHAR(50)
);
CREATE TABLE mz_cfmx (
    mx_id INTEGER PRIMARY KEY,
    cf_id INTEGER NOT NULL REFERENCES mz_cf(cf_id),
    yp_id INTEGER NOT NULL REFERENCES mz_yp(yp_id),
    sl INTEGER,
    yf VARCHAR(40)
);
CREATE TABLE yf_kc (
    kc_id INTEGER PRIMARY KEY,
    yp_id INTEGER NOT NULL REFERENCES mz_yp(yp_id),
    yfmc VARCHAR(20),
    kcsl INTEGER,
    yxq DATE
);
CREATE TABLE zy_br (
    zy_id INTEGER PRIMARY KEY,
    hz_id INTEGER NOT NULL REFERENCES hz(hz_id),
    ks_id INTEGER NOT NULL REFERENCES ks(ks_id),
    zzys_id INTEGER NOT NULL REFERENCES ys(ys_id),
    ryrq DATE,
    cyrq DATE,
    cwh VARCHAR(10),
    ryzd VARCHAR(50)
);
"""

# --------------------------------------------------------------------------- reference data


@dataclass(frozen=True)
class _Drug:
    """One catalogue entry; ``kind`` decides which pharmacies stock it."""

    name: str
    spec: str
    unit: str
    price: float
    maker: str
    usage: str
    kind: str  # "xy" western medicine, "zcy" Chinese patent medicine, "inj" injection


# 门诊西药房 stocks "xy", 中药房 "zcy", 急诊药房 the injections and _ER_DRUGS, 住院药房 everything.
_DRUGS: tuple[_Drug, ...] = (
    _Drug("阿莫西林胶囊", "0.25g*24粒", "盒", 9.80, "珠海联邦制药股份有限公司", "口服 一日三次 每次2粒", "xy"),
    _Drug("头孢克肟分散片", "0.1g*6片", "盒", 23.50, "广州白云山制药股份有限公司", "口服 一日两次 每次1片", "xy"),
    _Drug("阿奇霉素片", "0.25g*6片", "盒", 19.80, "辉瑞制药有限公司", "口服 一日一次 每次2片", "xy"),
    _Drug("左氧氟沙星片", "0.5g*4片", "盒", 21.60, "第一三共制药(北京)有限公司", "口服 一日一次 每次1片", "xy"),
    _Drug("头孢呋辛酯片", "0.25g*12片", "盒", 32.40, "葛兰素史克制药(苏州)有限公司", "口服 一日两次 每次1片", "xy"),
    _Drug("头孢克洛干混悬剂", "0.125g*6袋", "盒", 18.90, "苏州西克罗制药有限公司", "口服 一日三次 每次1袋", "xy"),
    _Drug("阿莫西林克拉维酸钾干混悬剂", "228.5mg*6袋", "盒", 26.80, "华北制药股份有限公司", "口服 一日两次 每次1袋", "xy"),
    _Drug("甲硝唑片", "0.2g*100片", "瓶", 6.50, "上海信谊药厂有限公司", "口服 一日三次 每次2片", "xy"),
    _Drug("氨溴索口服溶液", "100ml:0.6g", "瓶", 28.50, "上海勃林格殷格翰药业有限公司", "口服 一日三次 每次10ml", "xy"),
    _Drug("复方甘草片", "100片", "瓶", 5.80, "四川依科制药有限公司", "口服 一日三次 每次3片", "xy"),
    _Drug("沙丁胺醇气雾剂", "100μg*200揿", "支", 26.00, "葛兰素史克制药(苏州)有限公司", "吸入 必要时 每次1-2揿", "xy"),
    _Drug("布地奈德福莫特罗吸入粉雾剂", "160μg/4.5μg*60吸", "支", 248.00, "阿斯利康制药有限公司", "吸入 一日两次 每次1吸", "xy"),
    _Drug("连花清瘟胶囊", "0.35g*24粒", "盒", 14.80, "石家庄以岭药业股份有限公司", "口服 一日三次 每次4粒", "zcy"),
    _Drug("蒲地蓝消炎口服液", "10ml*10支", "盒", 32.00, "济川药业集团有限公司", "口服 一日三次 每次10ml", "zcy"),
    _Drug("板蓝根颗粒", "10g*20袋", "盒", 15.00, "广州白云山和记黄埔中药有限公司", "冲服 一日三次 每次1袋", "zcy"),
    _Drug("感冒清热颗粒", "12g*10袋", "盒", 16.50, "北京同仁堂科技发展股份有限公司", "冲服 一日两次 每次1袋", "zcy"),
    _Drug("小儿氨酚黄那敏颗粒", "0.5g*12袋", "盒", 12.80, "华润三九医药股份有限公司", "冲服 一日三次 每次1袋", "xy"),
    _Drug("布洛芬混悬液", "100ml:2g", "瓶", 22.80, "上海强生制药有限公司", "口服 发热时 每次5ml", "xy"),
    _Drug("布洛芬缓释胶囊", "0.3g*20粒", "盒", 18.60, "中美天津史克制药有限公司", "口服 一日两次 每次1粒", "xy"),
    _Drug("西地碘含片", "1.5mg*15片", "盒", 13.50, "北京华素制药股份有限公司", "含服 一日三次 每次1片", "xy"),
    _Drug("氨氯地平片", "5mg*7片", "盒", 34.50, "辉瑞制药有限公司", "口服 一日一次 每次1片", "xy"),
    _Drug("硝苯地平控释片", "30mg*7片", "盒", 32.90, "拜耳医药保健有限公司", "口服 一日一次 每次1片", "xy"),
    _Drug("阿司匹林肠溶片", "100mg*30片", "盒", 15.60, "拜耳医药保健有限公司", "口服 一日一次 每次1片", "xy"),
    _Drug("阿托伐他汀钙片", "20mg*7片", "盒", 43.80, "辉瑞制药有限公司", "口服 一日一次 睡前1片", "xy"),
    _Drug("美托洛尔缓释片", "47.5mg*7片", "盒", 21.50, "阿斯利康制药有限公司", "口服 一日一次 每次1片", "xy"),
    _Drug("缬沙坦胶囊", "80mg*7粒", "盒", 25.60, "北京诺华制药有限公司", "口服 一日一次 每次1粒", "xy"),
    _Drug("硝酸甘油片", "0.5mg*100片", "瓶", 19.00, "北京益民药业有限公司", "舌下含服 胸痛时 每次1片", "xy"),
    _Drug("氯吡格雷片", "75mg*7片", "盒", 72.00, "赛诺菲(杭州)制药有限公司", "口服 一日一次 每次1片", "xy"),
    _Drug("复方丹参滴丸", "27mg*180丸", "瓶", 28.50, "天士力医药集团股份有限公司", "口服 一日三次 每次10丸", "zcy"),
    _Drug("螺内酯片", "20mg*100片", "瓶", 8.20, "杭州民生药业股份有限公司", "口服 一日一次 每次1片", "xy"),
    _Drug("呋塞米片", "20mg*100片", "瓶", 6.80, "上海朝晖药业有限公司", "口服 一日一次 每次1片", "xy"),
    _Drug("奥美拉唑肠溶胶囊", "20mg*14粒", "盒", 16.80, "山东罗欣药业集团股份有限公司", "口服 一日一次 早餐前1粒", "xy"),
    _Drug("雷贝拉唑钠肠溶片", "10mg*7片", "盒", 42.00, "卫材(中国)药业有限公司", "口服 一日一次 早餐前1片", "xy"),
    _Drug("蒙脱石散", "3g*10袋", "盒", 19.50, "博福-益普生(天津)制药有限公司", "冲服 一日三次 每次1袋", "xy"),
    _Drug("铝碳酸镁咀嚼片", "0.5g*20片", "盒", 24.60, "拜耳医药保健有限公司", "嚼服 一日三次 每次2片", "xy"),
    _Drug("多潘立酮片", "10mg*30片", "盒", 16.20, "西安杨森制药有限公司", "口服 一日三次 饭前1片", "xy"),
    _Drug("枯草杆菌二联活菌肠溶胶囊", "250mg*20粒", "盒", 27.80, "北京韩美药品有限公司", "口服 一日三次 每次1粒", "xy"),
    _Drug("双歧杆菌三联活菌胶囊", "210mg*36粒", "盒", 33.60, "上海信谊药厂有限公司", "口服 一日两次 每次2粒", "xy"),
    _Drug("口服补液盐散(III)", "5.125g*6袋", "盒", 9.60, "西安安健药业有限公司", "温水冲服 少量多次 每次1袋", "xy"),
    _Drug("藿香正气水", "10ml*10支", "盒", 12.00, "太极集团重庆涪陵制药厂有限公司", "口服 一日两次 每次10ml", "zcy"),
    _Drug("消旋山莨菪碱片", "5mg*100片", "瓶", 7.50, "杭州民生药业股份有限公司", "口服 腹痛时 每次1片", "xy"),
    _Drug("二甲双胍片", "0.5g*20片", "盒", 29.80, "中美上海施贵宝制药有限公司", "口服 一日两次 餐中1片", "xy"),
    _Drug("格列美脲片", "2mg*15片", "盒", 38.50, "赛诺菲(北京)制药有限公司", "口服 一日一次 早餐前1片", "xy"),
    _Drug("阿卡波糖片", "50mg*30片", "盒", 66.80, "拜耳医药保健有限公司", "嚼服 一日三次 随餐1片", "xy"),
    _Drug("甘精胰岛素注射液", "3ml:300单位", "支", 168.00, "赛诺菲(北京)制药有限公司", "皮下注射 一日一次 睡前", "xy"),
    _Drug("左甲状腺素钠片", "50μg*100片", "盒", 26.80, "默克制药(江苏)有限公司", "口服 一日一次 晨起空腹1片", "xy"),
    _Drug("甲巯咪唑片", "10mg*50片", "盒", 31.20, "默克制药(江苏)有限公司", "口服 一日三次 每次1片", "xy"),
    _Drug("碳酸钙D3片", "600mg*60片", "瓶", 45.00, "惠氏制药有限公司", "口服 一日一次 每次1片", "xy"),
    _Drug("阿法骨化醇软胶囊", "0.25μg*20粒", "盒", 36.50, "重庆药友制药有限责任公司", "口服 一日一次 每次1粒", "xy"),
    _Drug("甲钴胺片", "0.5mg*20片", "盒", 28.60, "卫材(中国)药业有限公司", "口服 一日三次 每次1片", "xy"),
    _Drug("尼莫地平片", "30mg*50片", "盒", 24.00, "拜耳医药保健有限公司", "口服 一日三次 每次1片", "xy"),
    _Drug("佐匹克隆片", "7.5mg*12片", "盒", 22.50, "齐鲁制药有限公司", "口服 睡前 每次1片", "xy"),
    _Drug("氟桂利嗪胶囊", "5mg*20粒", "盒", 15.80, "西安杨森制药有限公司", "口服 睡前 每次2粒", "xy"),
    _Drug("丁苯酞软胶囊", "0.1g*24粒", "盒", 198.00, "石药集团恩必普药业有限公司", "口服 一日三次 每次2粒", "xy"),
    _Drug("塞来昔布胶囊", "0.2g*6粒", "盒", 39.80, "辉瑞制药有限公司", "口服 一日一次 每次1粒", "xy"),
    _Drug("双氯芬酸钠缓释片", "75mg*10片", "盒", 18.80, "北京诺华制药有限公司", "口服 一日一次 每次1片", "xy"),
    _Drug("硫酸氨基葡萄糖胶囊", "0.25g*20粒", "盒", 42.00, "浙江海正药业股份有限公司", "口服 一日三次 每次2粒", "xy"),
    _Drug("洛索洛芬钠片", "60mg*20片", "盒", 26.40, "第一三共制药(上海)有限公司", "口服 一日三次 每次1片", "xy"),
    _Drug("云南白药气雾剂", "85g+60g", "盒", 45.00, "云南白药集团股份有限公司", "外用 一日三次 喷患处", "zcy"),
    _Drug("双氯芬酸二乙胺乳胶剂", "20g:0.2g", "支", 23.80, "北京诺华制药有限公司", "外用 一日三次 涂患处", "xy"),
    _Drug("叶酸片", "0.4mg*31片", "盒", 16.50, "北京斯利安药业有限公司", "口服 一日一次 每次1片", "xy"),
    _Drug("甲硝唑栓", "0.5g*10枚", "盒", 10.80, "湖北东信药业有限公司", "阴道给药 每晚一次 每次1枚", "xy"),
    _Drug("黄体酮胶囊", "100mg*20粒", "盒", 58.00, "浙江仙琚制药股份有限公司", "口服 一日两次 每次1粒", "xy"),
    _Drug("克霉唑阴道片", "0.5g*1片", "盒", 19.60, "拜耳医药保健有限公司", "阴道给药 单次 每次1片", "xy"),
    _Drug("益母草颗粒", "15g*10袋", "盒", 13.80, "江西杏林白马药业有限公司", "冲服 一日两次 每次1袋", "zcy"),
    _Drug("氯雷他定片", "10mg*6片", "盒", 18.50, "拜耳医药保健有限公司", "口服 一日一次 每次1片", "xy"),
    _Drug("西替利嗪片", "10mg*12片", "盒", 22.00, "优时比(珠海)制药有限公司", "口服 一日一次 每次1片", "xy"),
    _Drug("糠酸莫米松乳膏", "5g:5mg", "支", 24.50, "上海先灵葆雅制药有限公司", "外用 一日一次 涂患处", "xy"),
    _Drug("阿昔洛韦片", "0.1g*24片", "盒", 8.90, "丽珠集团丽珠制药厂", "口服 一日五次 每次2片", "xy"),
    _Drug("盐酸特比萘芬乳膏", "10g:0.1g", "支", 16.80, "中美天津史克制药有限公司", "外用 一日两次 涂患处", "xy"),
    _Drug("阿达帕林凝胶", "30g:30mg", "支", 48.00, "重庆华邦制药有限公司", "外用 每晚一次 涂患处", "xy"),
    _Drug("莫匹罗星软膏", "15g:0.3g", "支", 22.50, "中美天津史克制药有限公司", "外用 一日三次 涂患处", "xy"),
    _Drug("左氧氟沙星滴眼液", "5ml:24.4mg", "支", 26.00, "参天制药(中国)有限公司", "滴眼 一日四次 每次1滴", "xy"),
    _Drug("玻璃酸钠滴眼液", "5ml:5mg", "支", 38.80, "参天制药(中国)有限公司", "滴眼 一日四次 每次1滴", "xy"),
    _Drug("妥布霉素地塞米松滴眼液", "5ml", "支", 32.50, "山东博士伦福瑞达制药有限公司", "滴眼 一日四次 每次1滴", "xy"),
    _Drug("红霉素眼膏", "2.5g:12.5mg", "支", 3.50, "广州白云山制药股份有限公司", "涂眼 睡前一次", "xy"),
    _Drug("糠酸莫米松鼻喷雾剂", "50μg*60揿", "支", 78.00, "上海先灵葆雅制药有限公司", "喷鼻 一日一次 每侧2揿", "xy"),
    _Drug("桉柠蒎肠溶软胶囊", "0.3g*12粒", "盒", 29.80, "北京九和药业有限公司", "口服 一日三次 每次1粒", "xy"),
    _Drug("康复新液", "100ml", "瓶", 35.00, "四川好医生攀西药业有限责任公司", "含漱 一日三次 每次10ml", "zcy"),
    _Drug("0.9%氯化钠注射液", "250ml:2.25g", "瓶", 4.50, "四川科伦药业股份有限公司", "静脉滴注 一日一次 每次250ml", "inj"),
    _Drug("葡萄糖氯化钠注射液", "500ml", "瓶", 5.80, "四川科伦药业股份有限公司", "静脉滴注 一日一次 每次500ml", "inj"),
    _Drug("注射用头孢曲松钠", "1.0g", "支", 12.60, "上海罗氏制药有限公司", "静脉滴注 一日一次 每次2支", "inj"),
    _Drug("注射用奥美拉唑钠", "40mg", "支", 28.00, "阿斯利康制药有限公司", "静脉滴注 一日一次 每次1支", "inj"),
    _Drug("地塞米松磷酸钠注射液", "1ml:5mg", "支", 1.20, "天津金耀药业有限公司", "肌内注射 单次 每次1支", "inj"),
    _Drug("盐酸消旋山莨菪碱注射液", "1ml:10mg", "支", 2.80, "杭州民生药业股份有限公司", "肌内注射 单次 每次1支", "inj"),
)

_ER_DRUGS = ("布洛芬缓释胶囊", "蒙脱石散", "奥美拉唑肠溶胶囊", "氯雷他定片", "硝酸甘油片", "阿司匹林肠溶片",
             "布洛芬混悬液", "沙丁胺醇气雾剂", "头孢克肟分散片", "阿莫西林胶囊", "消旋山莨菪碱片",
             "口服补液盐散(III)", "双氯芬酸二乙胺乳胶剂", "藿香正气水", "云南白药气雾剂")  # fmt: skip
"""Oral and topical drugs the emergency pharmacy keeps besides its injections."""


@dataclass(frozen=True)
class _Dx:
    """A diagnosis, who can have it, and what is prescribed for it (empty: no prescription)."""

    name: str
    drugs: tuple[str, ...] = ()
    min_age: int = 0
    max_age: int = 120
    sex: str = ""  # "女" / "男" when only one sex can have it
    chronic: bool = False  # repeat visits keep it; packs last a month


@dataclass(frozen=True)
class _Stay:
    """An admission diagnosis and its length of stay in days."""

    name: str
    min_age: int
    max_age: int
    days: tuple[int, int]
    sex: str = ""


@dataclass(frozen=True)
class _Dept:
    name: str
    place: str
    doctors: tuple[int, int, int, int]  # 主任 / 副主任 / 主治 / 住院医师 counts
    weight: float  # share of registrations
    visits: tuple[_Dx, ...]
    stays: tuple[_Stay, ...] = ()  # empty: no ward
    winter: float = 1.0  # registrations in Dec-Feb are this much more likely


_TITLES = ("主任医师", "副主任医师", "主治医师", "住院医师")
_EXPERTS = ("主任医师", "副主任医师")

_DEPTS: tuple[_Dept, ...] = (
    _Dept("心内科", "门诊楼3层东区", (1, 1, 2, 1), 9, (
        _Dx("原发性高血压", ("氨氯地平片", "硝苯地平控释片", "缬沙坦胶囊", "美托洛尔缓释片"), 35, chronic=True),
        _Dx("冠状动脉粥样硬化性心脏病", ("阿司匹林肠溶片", "阿托伐他汀钙片", "美托洛尔缓释片", "氯吡格雷片",
                                    "复方丹参滴丸"), 45, chronic=True),
        _Dx("稳定型心绞痛", ("硝酸甘油片", "阿司匹林肠溶片", "阿托伐他汀钙片", "复方丹参滴丸"), 45, chronic=True),
        _Dx("心律失常", ("美托洛尔缓释片",), 30),
        _Dx("慢性心力衰竭", ("呋塞米片", "螺内酯片", "美托洛尔缓释片"), 55, chronic=True),
    ), (
        _Stay("急性心肌梗死", 45, 95, (7, 14)), _Stay("不稳定型心绞痛", 45, 95, (5, 10)),
        _Stay("慢性心力衰竭急性加重", 55, 95, (7, 15)), _Stay("心房颤动", 50, 95, (4, 9)),
    )),
    _Dept("呼吸内科", "门诊楼2层东区", (1, 1, 2, 1), 10, (
        _Dx("上呼吸道感染", ("连花清瘟胶囊", "感冒清热颗粒", "布洛芬缓释胶囊", "蒲地蓝消炎口服液", "板蓝根颗粒"), 14),
        _Dx("急性支气管炎", ("阿莫西林胶囊", "头孢克肟分散片", "氨溴索口服溶液", "复方甘草片", "阿奇霉素片"), 14),
        _Dx("社区获得性肺炎", ("左氧氟沙星片", "阿奇霉素片", "头孢呋辛酯片", "氨溴索口服溶液"), 14),
        _Dx("支气管哮喘", ("沙丁胺醇气雾剂", "布地奈德福莫特罗吸入粉雾剂"), 14, chronic=True),
        _Dx("慢性阻塞性肺疾病", ("布地奈德福莫特罗吸入粉雾剂", "氨溴索口服溶液", "沙丁胺醇气雾剂"), 50, chronic=True),
    ), (
        _Stay("社区获得性肺炎", 14, 95, (6, 12)), _Stay("慢性阻塞性肺疾病急性加重", 50, 95, (7, 14)),
        _Stay("支气管扩张伴感染", 30, 90, (6, 11)),
    ), winter=1.8),
    _Dept("消化内科", "门诊楼2层西区", (1, 1, 1, 1), 8, (
        _Dx("急性胃肠炎", ("蒙脱石散", "枯草杆菌二联活菌肠溶胶囊", "口服补液盐散(III)", "藿香正气水", "消旋山莨菪碱片"), 14),
        _Dx("慢性胃炎", ("奥美拉唑肠溶胶囊", "铝碳酸镁咀嚼片", "多潘立酮片"), 18, chronic=True),
        _Dx("胃食管反流病", ("雷贝拉唑钠肠溶片", "奥美拉唑肠溶胶囊", "铝碳酸镁咀嚼片"), 18),
        _Dx("消化性溃疡", ("雷贝拉唑钠肠溶片", "阿莫西林胶囊", "铝碳酸镁咀嚼片"), 18),
        _Dx("功能性消化不良", ("多潘立酮片", "双歧杆菌三联活菌胶囊"), 18),
    ), (
        _Stay("上消化道出血", 18, 95, (5, 10)), _Stay("急性胰腺炎", 18, 90, (7, 16)),
        _Stay("肝硬化失代偿期", 40, 90, (10, 20)),
    )),
    _Dept("内分泌科", "门诊楼4层东区", (1, 1, 1, 1), 7, (
        _Dx("2型糖尿病", ("二甲双胍片", "格列美脲片", "阿卡波糖片", "甘精胰岛素注射液"), 30, chronic=True),
        _Dx("甲状腺功能亢进症", ("甲巯咪唑片", "美托洛尔缓释片"), 16, 70, chronic=True),
        _Dx("甲状腺功能减退症", ("左甲状腺素钠片",), 18, chronic=True),
        _Dx("高脂血症", ("阿托伐他汀钙片",), 30, chronic=True),
        _Dx("骨质疏松症", ("碳酸钙D3片", "阿法骨化醇软胶囊"), 50, chronic=True),
    ), (
        _Stay("2型糖尿病伴血糖控制不佳", 30, 95, (7, 12)), _Stay("糖尿病酮症酸中毒", 18, 80, (5, 10)),
    )),
    _Dept("神经内科", "门诊楼4层西区", (1, 1, 1, 1), 6, (
        _Dx("偏头痛", ("氟桂利嗪胶囊", "布洛芬缓释胶囊", "洛索洛芬钠片"), 16, 65),
        _Dx("紧张型头痛", ("布洛芬缓释胶囊", "洛索洛芬钠片"), 16),
        _Dx("失眠症", ("佐匹克隆片",), 18),
        _Dx("脑梗死恢复期", ("阿司匹林肠溶片", "阿托伐他汀钙片", "丁苯酞软胶囊", "尼莫地平片"), 50, chronic=True),
        _Dx("周围神经病", ("甲钴胺片",), 30),
    ), (
        _Stay("脑梗死", 50, 95, (10, 18)), _Stay("短暂性脑缺血发作", 45, 95, (4, 8)),
    )),
    _Dept("儿科", "门诊楼1层西区", (1, 2, 2, 1), 11, (
        _Dx("上呼吸道感染", ("小儿氨酚黄那敏颗粒", "布洛芬混悬液", "蒲地蓝消炎口服液"), 0, 13),
        _Dx("急性支气管炎", ("头孢克洛干混悬剂", "阿莫西林克拉维酸钾干混悬剂", "氨溴索口服溶液"), 0, 13),
        _Dx("小儿腹泻", ("蒙脱石散", "口服补液盐散(III)", "双歧杆菌三联活菌胶囊"), 0, 6),
        _Dx("手足口病", ("布洛芬混悬液", "蒲地蓝消炎口服液"), 0, 6),
        _Dx("急性扁桃体炎", ("阿莫西林克拉维酸钾干混悬剂", "头孢克洛干混悬剂", "布洛芬混悬液"), 2, 13),
    ), (
        _Stay("支气管肺炎", 0, 13, (5, 9)), _Stay("小儿腹泻伴脱水", 0, 5, (3, 6)),
    ), winter=1.6),
    _Dept("普外科", "门诊楼3层西区", (1, 1, 2, 1), 6, (
        _Dx("急性阑尾炎", ("头孢呋辛酯片", "甲硝唑片"), 14),
        _Dx("腹股沟疝", (), 20),
        _Dx("胆囊结石", ("消旋山莨菪碱片",), 25),
        _Dx("体表软组织感染", ("头孢呋辛酯片", "莫匹罗星软膏"), 14),
        _Dx("皮脂腺囊肿", (), 16),
    ), (
        _Stay("急性阑尾炎", 14, 85, (4, 7)), _Stay("胆囊结石伴慢性胆囊炎", 25, 85, (5, 9)),
        _Stay("腹股沟疝", 20, 90, (3, 6)),
    )),
    _Dept("骨科", "门诊楼1层东区", (1, 1, 2, 1), 7, (
        _Dx("腰椎间盘突出症", ("塞来昔布胶囊", "甲钴胺片", "洛索洛芬钠片"), 20),
        _Dx("膝关节骨关节炎", ("硫酸氨基葡萄糖胶囊", "塞来昔布胶囊", "双氯芬酸二乙胺乳胶剂"), 45, chronic=True),
        _Dx("颈椎病", ("甲钴胺片", "洛索洛芬钠片", "双氯芬酸钠缓释片"), 25),
        _Dx("急性腰扭伤", ("云南白药气雾剂", "布洛芬缓释胶囊", "双氯芬酸二乙胺乳胶剂"), 16, 70),
        _Dx("桡骨远端骨折", ("布洛芬缓释胶囊",), 14),
    ), (
        _Stay("股骨颈骨折", 60, 95, (10, 20)), _Stay("腰椎间盘突出症", 25, 80, (7, 14)),
        _Stay("胫腓骨骨折", 16, 75, (10, 18)),
    )),
    _Dept("妇产科", "门诊楼5层", (1, 1, 2, 1), 7, (
        _Dx("早孕", ("叶酸片",), 20, 42, "女"),
        _Dx("细菌性阴道病", ("甲硝唑栓",), 18, 60, "女"),
        _Dx("外阴阴道假丝酵母菌病", ("克霉唑阴道片",), 18, 60, "女"),
        _Dx("月经不调", ("益母草颗粒", "黄体酮胶囊"), 16, 50, "女"),
        _Dx("盆腔炎", ("左氧氟沙星片", "甲硝唑片"), 18, 55, "女"),
    ), (
        _Stay("足月妊娠", 20, 42, (3, 6), "女"), _Stay("子宫肌瘤", 30, 55, (5, 9), "女"),
    )),
    _Dept("皮肤科", "门诊楼6层东区", (1, 0, 1, 1), 5, (
        _Dx("湿疹", ("糠酸莫米松乳膏", "氯雷他定片"), 2),
        _Dx("荨麻疹", ("氯雷他定片", "西替利嗪片"), 6),
        _Dx("痤疮", ("阿达帕林凝胶",), 12, 35),
        _Dx("带状疱疹", ("阿昔洛韦片", "甲钴胺片"), 40),
        _Dx("足癣", ("盐酸特比萘芬乳膏",), 14),
    )),
    _Dept("眼科", "门诊楼6层西区", (1, 0, 1, 1), 5, (
        _Dx("结膜炎", ("左氧氟沙星滴眼液", "妥布霉素地塞米松滴眼液"), 3),
        _Dx("干眼症", ("玻璃酸钠滴眼液",), 18),
        _Dx("睑腺炎", ("红霉素眼膏", "左氧氟沙星滴眼液"), 3),
        _Dx("老年性白内障", (), 55),
        _Dx("屈光不正", (), 6),
    ), (
        _Stay("老年性白内障", 55, 95, (2, 4)),
    )),
    _Dept("耳鼻喉科", "门诊楼5层东区", (1, 0, 1, 1), 5, (
        _Dx("过敏性鼻炎", ("糠酸莫米松鼻喷雾剂", "氯雷他定片"), 6, chronic=True),
        _Dx("急性咽炎", ("西地碘含片", "蒲地蓝消炎口服液"), 14),
        _Dx("慢性鼻窦炎", ("桉柠蒎肠溶软胶囊", "糠酸莫米松鼻喷雾剂"), 14),
        _Dx("急性中耳炎", ("阿莫西林胶囊", "头孢克肟分散片"), 14),
    ), (
        _Stay("慢性扁桃体炎", 8, 50, (4, 7)), _Stay("慢性鼻窦炎", 18, 75, (5, 8)),
    )),
    _Dept("口腔科", "门诊楼7层", (1, 0, 1, 1), 5, (
        _Dx("龋齿", (), 3),
        _Dx("慢性牙周炎", ("甲硝唑片", "康复新液"), 25),
        _Dx("复发性口腔溃疡", ("康复新液", "西地碘含片"), 14),
        _Dx("智齿冠周炎", ("甲硝唑片", "阿莫西林胶囊"), 16, 45),
    )),
    _Dept("急诊科", "急诊楼1层", (1, 1, 2, 1), 6, (
        _Dx("急性胃肠炎", ("蒙脱石散", "0.9%氯化钠注射液", "注射用奥美拉唑钠", "盐酸消旋山莨菪碱注射液"), 14),
        _Dx("发热", ("布洛芬缓释胶囊", "0.9%氯化钠注射液", "注射用头孢曲松钠"), 14),
        _Dx("软组织挫伤", ("云南白药气雾剂", "双氯芬酸二乙胺乳胶剂"), 14),
        _Dx("急性酒精中毒", ("葡萄糖氯化钠注射液", "注射用奥美拉唑钠"), 18),
        _Dx("急性荨麻疹", ("地塞米松磷酸钠注射液", "氯雷他定片"), 14),
    )),
)  # fmt: skip

_PHARMACIES = ("门诊西药房", "中药房", "急诊药房", "住院药房")

# Surnames with their approximate shares (per thousand) of the population.
_SURNAMES = (
    ("王", 71), ("李", 70), ("张", 68), ("刘", 54), ("陈", 45), ("杨", 31), ("黄", 22), ("赵", 22), ("吴", 20),
    ("周", 19), ("徐", 13), ("孙", 13), ("马", 11), ("朱", 11), ("胡", 10), ("郭", 10), ("何", 9), ("林", 9),
    ("高", 9), ("罗", 8), ("郑", 8), ("梁", 7), ("谢", 6), ("宋", 5), ("唐", 5), ("许", 5), ("韩", 5), ("冯", 5),
    ("邓", 5), ("曹", 5), ("彭", 4), ("曾", 4), ("肖", 4), ("田", 4), ("董", 4), ("袁", 4), ("潘", 4), ("于", 4),
    ("蒋", 4), ("蔡", 4), ("余", 4), ("杜", 4), ("叶", 4), ("程", 3), ("苏", 3), ("魏", 3), ("吕", 3), ("丁", 3),
    ("任", 3), ("沈", 3), ("姚", 3), ("卢", 3), ("姜", 3), ("崔", 3), ("钟", 3), ("谭", 3), ("陆", 3), ("汪", 3),
    ("范", 3), ("金", 3), ("石", 3), ("廖", 3), ("贾", 3), ("夏", 2), ("韦", 2), ("付", 2), ("方", 2), ("白", 2),
    ("邹", 2), ("孟", 2), ("熊", 2), ("秦", 2), ("邱", 2), ("江", 2), ("尹", 2), ("薛", 2), ("闫", 2), ("段", 2),
    ("雷", 2), ("侯", 2), ("龙", 2), ("史", 2), ("陶", 2), ("黎", 2), ("贺", 2), ("顾", 2), ("毛", 2), ("郝", 2),
    ("龚", 2), ("邵", 2), ("万", 2), ("钱", 2), ("严", 2), ("武", 2), ("戴", 2), ("孔", 1), ("汤", 1), ("欧阳", 1),
)  # fmt: skip

# Given names by sex and by the decade people were born in, as they were fashionable then.
_GIVEN: dict[tuple[str, str], tuple[str, ...]] = {
    ("男", "old"): ("建国", "国强", "建华", "志明", "德明", "文华", "永刚", "振华", "树林", "福生", "宝山", "国庆",
                   "玉明", "金生", "伟", "明", "军", "强", "华", "德胜"),
    ("女", "old"): ("秀英", "桂英", "秀兰", "玉兰", "桂兰", "秀珍", "凤英", "玉珍", "淑珍", "玉梅", "桂芳", "淑英",
                   "翠兰", "秀云", "兰英", "素芬"),
    ("男", "mid"): ("伟", "强", "军", "勇", "磊", "涛", "斌", "刚", "平", "辉", "建军", "志强", "海涛", "建平", "卫东",
                   "立新", "晓东", "国华", "红兵", "永辉"),
    ("女", "mid"): ("丽", "艳", "敏", "静", "娟", "霞", "红", "燕", "萍", "玲", "丽华", "红梅", "海燕", "春梅", "丽娟",
                   "秀梅", "晓红", "艳玲", "秀英"),
    ("男", "young"): ("磊", "洋", "勇", "杰", "涛", "超", "鹏", "鑫", "浩", "宇", "亮", "俊杰", "志伟", "文博", "家豪",
                     "晓明", "子健", "天宇", "鹏飞", "海波", "伟"),
    ("女", "young"): ("芳", "娜", "静", "敏", "婷", "雪", "慧", "颖", "倩", "琳", "晶", "丹", "莉", "晓燕", "婷婷",
                     "雪梅", "丽娜", "文静", "佳慧", "思雨"),
    ("男", "kid"): ("子轩", "浩然", "宇轩", "梓豪", "俊熙", "一鸣", "皓轩", "子墨", "宇航", "浩宇", "博文", "睿",
                   "泽宇", "奕辰", "沐阳", "锦程"),
    ("女", "kid"): ("梓涵", "欣怡", "雨桐", "可馨", "诗涵", "一诺", "子涵", "思琪", "佳怡", "梦琪", "语嫣", "雨欣",
                   "若汐", "梓萱", "芷若", "欣妍"),
}  # fmt: skip

# (share of patients, youngest, oldest age on the snapshot day)
_AGE_BANDS = ((0.16, 0, 13), (0.17, 14, 30), (0.26, 31, 50), (0.28, 51, 70), (0.13, 71, 92))

_INSURANCE = (("城镇职工", 45), ("城乡居民", 40), ("自费", 15))
_PRESCRIPTION_STATE = (("已发药", 86), ("已缴费", 6), ("未缴费", 8))
_MOBILE_PREFIXES = ("130", "131", "132", "133", "135", "136", "137", "138", "139", "150", "151", "152", "155",
                    "156", "158", "159", "166", "170", "176", "177", "180", "181", "182", "185", "186", "187",
                    "188", "189", "191", "198", "199")  # fmt: skip

# --------------------------------------------------------------------------- helpers


def _age(born: date, on: date) -> int:
    return on.year - born.year - ((on.month, on.day) < (born.month, born.day))


def _day(rng: random.Random, first: date, last: date) -> date:
    return first + timedelta(days=rng.randint(0, (last - first).days))


def _weighted(rng: random.Random, pairs: tuple[tuple[str, int], ...]) -> str:
    return rng.choices([p[0] for p in pairs], weights=[p[1] for p in pairs])[0]


def _generation(born_year: int) -> str:
    if born_year < 1960:
        return "old"
    if born_year < 1980:
        return "mid"
    if born_year < 2005:
        return "young"
    return "kid"


def _name(rng: random.Random, sex: str, generation: str) -> str:
    surname = rng.choices([s for s, _ in _SURNAMES], weights=[w for _, w in _SURNAMES])[0]
    return surname + rng.choice(_GIVEN[sex, generation])


def _fits(dx: _Dx | _Stay, age: int, sex: str) -> bool:
    return dx.min_age <= age <= dx.max_age and dx.sex in ("", sex)


# --------------------------------------------------------------------------- the build


def build_hospital(seed: int = SEED) -> bytes:
    """The ``hospital`` sample as the bytes of a SQLite file (the same bytes for the same seed).

    >>> import sqlite3
    >>> conn = sqlite3.connect(":memory:"); conn.deserialize(build_hospital())
    >>> conn.execute("SELECT ksmc FROM ks WHERE ks_id = 1").fetchone()
    ('心内科',)

    Raises:
        DataError: a generated row breaks a foreign key (a bug in this module).
    """
    rng = random.Random(seed)
    rows: dict[str, list[tuple[object, ...]]] = {}

    # ks: departments, in the order of _DEPTS; phones on one switchboard block.
    phones = rng.sample(range(1000, 10000), len(_DEPTS))
    rows["ks"] = [(i, d.name, d.place, f"0571-8706{phones[i - 1]}") for i, d in enumerate(_DEPTS, 1)]

    # ys: doctors by department and title; seniors were hired earlier.
    hired_between = {
        "主任医师": (date(1992, 7, 1), date(2008, 7, 1)),
        "副主任医师": (date(2003, 7, 1), date(2014, 7, 1)),
        "主治医师": (date(2010, 7, 1), date(2019, 7, 1)),
        "住院医师": (date(2018, 7, 1), date(2023, 7, 1)),
    }
    generation_of = {"主任医师": "mid", "副主任医师": "mid", "主治医师": "young", "住院医师": "young"}
    doctors: list[tuple[int, str, str, int, date]] = []
    for ks_id, dept in enumerate(_DEPTS, 1):
        for title, count in zip(_TITLES, dept.doctors, strict=True):
            for _ in range(count):
                first, last = hired_between[title]
                hired = _day(rng, first, last)
                hired = hired.replace(month=7, day=1) if rng.random() < 0.6 else hired  # most start in July
                sex = "女" if rng.random() < 0.45 else "男"
                doctors.append((len(doctors) + 1, _name(rng, sex, generation_of[title]), title, ks_id, hired))
    rows["ys"] = [(i, n, t, k, h.isoformat()) for i, n, t, k, h in doctors]

    # hz: patients; ages by band, names by the fashion of their birth years, unique mobiles.
    patients: list[tuple[int, str, str, date]] = []
    mobiles: list[str] = []
    used_mobiles: set[str] = set()
    for hz_id in range(1, N_PATIENTS + 1):
        _share, young, old = rng.choices(_AGE_BANDS, weights=[b[0] for b in _AGE_BANDS])[0]
        born = _day(rng, date(SNAPSHOT.year - old - 1, SNAPSHOT.month, SNAPSHOT.day) + timedelta(days=1),
                    date(SNAPSHOT.year - young, SNAPSHOT.month, SNAPSHOT.day))  # fmt: skip
        sex = "女" if rng.random() < 0.52 else "男"
        patients.append((hz_id, _name(rng, sex, _generation(born.year)), sex, born))
        while True:
            mobile = rng.choice(_MOBILE_PREFIXES) + f"{rng.randrange(10**8):08d}"
            if mobile not in used_mobiles:
                break
        used_mobiles.add(mobile)
        mobiles.append(mobile)
    insurance = [_weighted(rng, _INSURANCE) for _ in patients]
    for i, (_, _, _, born) in enumerate(patients):
        if _age(born, SNAPSHOT) < 18 and insurance[i] == "城镇职工":
            insurance[i] = "城乡居民"  # children are insured as residents, not employees
    rows["hz"] = [(i, n, s, b.isoformat(), mobiles[i - 1], insurance[i - 1]) for i, n, s, b in patients]

    # mz_yp: the drug catalogue.
    drug_id = {d.name: i for i, d in enumerate(_DRUGS, 1)}
    rows["mz_yp"] = [(i, d.name, d.spec, d.unit, d.price, d.maker) for i, d in enumerate(_DRUGS, 1)]

    # yf_kc: stock per pharmacy; a third of the lines have a second, later batch.
    stock: list[tuple[int, str, int, date]] = []
    for yp_id, drug in enumerate(_DRUGS, 1):
        where = []
        if drug.kind == "xy":
            where.append("门诊西药房")
        if drug.kind == "zcy":
            where.append("中药房")
        if drug.kind == "inj" or drug.name in _ER_DRUGS:
            where.append("急诊药房")
        where.append("住院药房")
        for pharmacy in where:
            batches = 2 if rng.random() < 0.35 else 1
            expiry = _day(rng, date(2024, 8, 1), date(2026, 6, 30))
            for _ in range(batches):
                amount = rng.randint(2, 60) * 10 if drug.kind != "inj" else rng.randint(10, 120) * 10
                stock.append((yp_id, pharmacy, amount, expiry.replace(day=1) - timedelta(days=1)))
                expiry = expiry + timedelta(days=rng.randint(180, 540))
    rows["yf_kc"] = [(i, y, p, a, e.isoformat()) for i, (y, p, a, e) in enumerate(stock, 1)]

    # mz_gh / mz_jz / mz_cf / mz_cfmx: registrations, the visits after them, prescriptions.
    staff = {ks_id: [d for d in doctors if d[3] == ks_id] for ks_id in range(1, len(_DEPTS) + 1)}
    all_days = [FIRST_DAY + timedelta(days=n) for n in range((SNAPSHOT - FIRST_DAY).days + 1)]
    day_weight = [(1.0 if d.weekday() < 5 else 0.6 if d.weekday() == 5 else 0.45) for d in all_days]
    patient_weight = [rng.expovariate(1.0) + 0.15 for _ in patients]
    last_seen: dict[int, tuple[int, _Dx]] = {}
    visits: list[tuple[date, date, int, int, str, float, int | None, _Dx | None]] = []
    while len(visits) < N_REGISTRATIONS:
        visit_day = rng.choices(all_days, weights=day_weight)[0]
        hz_id, _, sex, born = rng.choices(patients, weights=patient_weight)[0]
        age = _age(born, visit_day)
        if age < 0:
            continue
        winter = visit_day.month in (12, 1, 2)
        options = [
            (ks_id, dept)
            for ks_id, dept in enumerate(_DEPTS, 1)
            if any(_fits(dx, age, sex) for dx in dept.visits)
        ]
        before = last_seen.get(hz_id)
        if before is not None and rng.random() < 0.4 and any(k == before[0] for k, _ in options):
            ks_id = before[0]
        else:
            weights = [dept.weight * (dept.winter if winter else 1.0) for _, dept in options]
            ks_id = rng.choices([k for k, _ in options], weights=weights)[0]
        dept = _DEPTS[ks_id - 1]
        emergency = dept.name == "急诊科"
        slot = "专家号" if not emergency and rng.random() < 0.3 else "普通号"
        booked = visit_day - timedelta(days=rng.randint(1, 7)) if not emergency and rng.random() < 0.2 else visit_day
        booked = max(booked, FIRST_DAY)
        on_duty = [d for d in staff[ks_id] if d[4] <= visit_day and (d[2] in _EXPERTS) == (slot == "专家号")]
        if not on_duty:
            continue
        if rng.random() < 0.08:  # registered, never seen (no-show or refund)
            fee = (15.0 if emergency else 10.0) if slot == "普通号" else rng.choice((30.0, 50.0))
            visits.append((booked, visit_day, hz_id, ks_id, slot, fee, None, None))
            continue
        doctor = rng.choice(on_duty)
        fee = {"主任医师": 50.0, "副主任医师": 30.0}.get(doctor[2], 15.0 if emergency else 10.0)
        fitting = [dx for dx in dept.visits if _fits(dx, age, sex)]
        follow_up = before is not None and before[0] == ks_id and before[1].chronic and before[1] in fitting
        if before is not None and follow_up and rng.random() < 0.7:
            dx = before[1]  # a follow-up of the same chronic illness
        else:
            dx = rng.choice(fitting)
        last_seen[hz_id] = (ks_id, dx)
        visits.append((booked, visit_day, hz_id, ks_id, slot, fee, doctor[0], dx))

    visits.sort(key=lambda v: (v[0], v[1], v[2], v[3]))
    rows["mz_gh"] = [(gh_id, v[2], v[3], v[0].isoformat(), v[5], v[4]) for gh_id, v in enumerate(visits, 1)]
    seen = sorted(
        ((v[1], gh_id, v[6], v[7]) for gh_id, v in enumerate(visits, 1) if v[6] is not None),
        key=lambda s: (s[0], s[1]),
    )
    rows["mz_jz"] = []
    rows["mz_cf"] = []
    rows["mz_cfmx"] = []
    for jz_id, (visit_day, gh_id, ys_id, dx) in enumerate(seen, 1):
        assert dx is not None
        rows["mz_jz"].append((jz_id, gh_id, ys_id, visit_day.isoformat(), dx.name))
        if not dx.drugs or rng.random() < 0.1:
            continue
        n_items = min(len(dx.drugs), rng.choices((1, 2, 3, 4), weights=(12, 34, 34, 20))[0])
        chosen = sorted(rng.sample(dx.drugs, n_items), key=dx.drugs.index)
        cf_id = len(rows["mz_cf"]) + 1
        total_cents = 0
        for name in chosen:
            drug = _DRUGS[drug_id[name] - 1]
            if drug.kind == "inj":
                packs = rng.randint(1, 3)
            elif dx.chronic:
                packs = rng.choice((2, 3, 4))
            else:
                packs = rng.choice((1, 1, 1, 2))
            total_cents += packs * round(drug.price * 100)
            rows["mz_cfmx"].append((len(rows["mz_cfmx"]) + 1, cf_id, drug_id[name], packs, drug.usage))
        state = _weighted(rng, _PRESCRIPTION_STATE)
        rows["mz_cf"].append((cf_id, jz_id, visit_day.isoformat(), total_cents / 100, state))

    # zy_br: inpatient stays; a bed holds one patient at a time, a patient one stay at a time.
    wards = [(ks_id, d) for ks_id, d in enumerate(_DEPTS, 1) if d.stays]
    ward_no = {ks_id: n for n, (ks_id, _) in enumerate(wards, 1)}
    beds_per_ward = 24
    admissions: list[date] = sorted(
        [_day(rng, FIRST_DAY, date(2024, 6, 10)) for _ in range(N_INPATIENTS - 15)]
        + [_day(rng, date(2024, 6, 11), SNAPSHOT) for _ in range(15)]
    )
    bed_free_from: dict[tuple[int, int], date] = {}
    patient_free_from: dict[int, date] = {}
    stays: list[tuple[int, int, int, date, date | None, str, str]] = []
    for admitted in admissions:
        while True:
            ks_id, dept = rng.choices(wards, weights=[d.weight for _, d in wards])[0]
            hz_id, _, sex, born = rng.choice(patients)
            age = _age(born, admitted)
            fitting = [s for s in dept.stays if _fits(s, age, sex)]
            attending = [d for d in staff[ks_id] if d[2] != "住院医师" and d[4] <= admitted]
            free_beds = [b for b in range(1, beds_per_ward + 1) if bed_free_from.get((ks_id, b), FIRST_DAY) <= admitted]
            if age >= 0 and fitting and attending and free_beds and patient_free_from.get(hz_id, FIRST_DAY) <= admitted:
                break
        stay = rng.choice(fitting)
        discharged = admitted + timedelta(days=rng.randint(*stay.days))
        bed = rng.choice(free_beds)
        bed_free_from[ks_id, bed] = discharged
        patient_free_from[hz_id] = discharged + timedelta(days=1)
        doctor = rng.choice(attending)
        left = discharged if discharged <= SNAPSHOT else None
        stays.append((hz_id, ks_id, doctor[0], admitted, left, f"{ward_no[ks_id]}病区{bed:02d}床", stay.name))
    rows["zy_br"] = [
        (i, h, k, y, a.isoformat(), d.isoformat() if d else None, b, s)
        for i, (h, k, y, a, d, b, s) in enumerate(stays, 1)
    ]

    conn = sqlite3.connect(":memory:")
    try:
        conn.executescript(DDL)
        for table in ("ks", "ys", "hz", "mz_yp", "yf_kc", "mz_gh", "mz_jz", "mz_cf", "mz_cfmx", "zy_br"):
            data = sorted(rows[table], key=lambda r: r[0])
            marks = ", ".join("?" * len(data[0]))
            conn.executemany(f"INSERT INTO {table} VALUES ({marks})", data)
        return serialize_database(conn, where="hospital")
    finally:
        conn.close()
